"""The adapter's pieces chained the way the runner uses them, on real Docker (no runner core):

fixture image -> present the reference -> oracle writes its files as ``agent`` -> export
``/workspace`` -> ``submission.tar.gz`` -> official eval -> 1.0.
"""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest
from pb_support import unique_name

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.fixture import FixturePaths
from benchmarks.programbench.official_eval import evaluate_instance
from benchmarks.programbench.submission import build_submission, list_submission
from benchmarks.programbench.workspace import present_reference_argv

pytestmark = pytest.mark.docker


def _docker(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["docker", *args], input=stdin, capture_output=True, timeout=120, check=True
    )


@pytest.mark.parametrize("agent", ["oracle", "nop"])
def test_agent_phase_to_official_score(
    pb_fixture: FixturePaths, tmp_path: Path, agent: str
) -> None:
    name = unique_name()
    _docker(
        "run",
        "-d",
        "--name",
        name,
        "--network",
        "none",
        "--cap-drop",
        "SYS_PTRACE",
        pb_fixture.image,
        "sleep",
        "600",
    )
    try:
        _docker("exec", "-u", "root", name, *present_reference_argv())
        if agent == "oracle":
            buf = tmp_path / "oracle.tar"
            with tarfile.open(buf, "w") as tar:
                for rel in pb_fixture.oracle_files:
                    tar.add(Path(pb_fixture.oracle_dir) / rel, arcname=rel)
            _docker(
                "exec",
                "-i",
                "-u",
                "agent",
                name,
                "tar",
                "-C",
                "/workspace",
                "-xf",
                "-",
                stdin=buf.read_bytes(),
            )
            probe = _docker(
                "exec",
                "-u",
                "agent",
                name,
                "bash",
                "-lc",
                "cd /workspace && bash compile.sh && ./executable 2 + 3 "
                "&& ./reference_executable 2 + 3 && git add -A && "
                "git commit -qm solve && git status --porcelain",
            )
            assert probe.stdout.decode().split() == ["5", "5"]
        exported = tmp_path / "workspace"
        exported.mkdir()
        _docker("cp", f"{name}:/workspace/.", str(exported))
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60, check=False)
    assert (exported / "reference_executable").exists()
    info = build_submission(exported, tmp_path / "src" / FIXTURE_ID / "submission.tar.gz")
    names = list_submission(Path(info.path))
    assert "reference_executable" not in names and "executable" not in names
    assert not any(n.startswith(".git") for n in names)
    result = evaluate_instance(tmp_path / "src", FIXTURE_ID, blob_dir=pb_fixture.blob_dir)
    assert result.official_eval_status == "completed"
    if agent == "oracle":
        assert names == ["README.md", "calculator.sh", "compile.sh"]
        assert result.score == 1.0 and result.resolved is True
    else:
        assert names == ["README.md"]
        assert result.score == 0.0 and result.error_code == "compile_failed"
