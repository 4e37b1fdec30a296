"""Helpers of the reference-protection attack tests (tests/security/test_reference_*.py).

An attack is a real ProgramBench run on the offline fixture with ``--agent command``: the
adversarial command runs in the cleanroom sandbox as the agent user, writes what each
attempt did to ``/workspace/attack.log`` (exported with the workspace), and the test then
checks that no byte-identical copy of the reference, and no dump of its mapped segments,
exists anywhere in the run root or in ``submission.tar.gz``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.fixture import ensure_fixture, fixture_cache_root
from tests.support.suite import Run, run_pytest

TARGET = "benchmarks/programbench"
# In the reference's read-only data: any dump of its mapped segments carries it; neither the
# oracle's shell script, nor the attack commands, nor any system binary does.
REFERENCE_MARKER = b"usage: %s A OP B"


@dataclass(frozen=True)
class Reference:
    sha256: str
    size: int


def fixture_reference() -> Reference:
    """The fixture's reference as built on the host (test side; the harness never reads it)."""
    paths = ensure_fixture()
    data = (fixture_cache_root() / paths.fingerprint / "reference" / "calculator").read_bytes()
    assert hashlib.sha256(data).hexdigest() == paths.reference_sha256
    assert REFERENCE_MARKER in data
    return Reference(paths.reference_sha256, len(data))


def gcc_shared(tmp: Path, source: str) -> bytes:
    """A shared library compiled on the host (the fixture image has no compiler)."""
    gcc = shutil.which("gcc")
    assert gcc, "gcc is needed to build the attack library: apt-get install gcc libc6-dev"
    (tmp / "attack.c").write_text(source)
    out = tmp / "attack.so"
    subprocess.run([gcc, "-O2", "-s", "-shared", "-fPIC", "-o", str(out), str(tmp / "attack.c")],
                   check=True)
    return out.read_bytes()


def run_attack(root: Path, command: str) -> tuple[Run, dict[str, Any]]:
    """One run of the fixture with ``command`` as the agent; returns (run, the fixture row)."""
    run = run_pytest(TARGET, root, "--pb-fixtures", "-k", "calculator", "--agent", "command",
                     "--agent-command", command, "--pb-eval", "off")
    assert FIXTURE_ID in run.latest, run.out
    row = run.latest[FIXTURE_ID]
    assert row["outcome"] != "infra_failed", run.out  # the preparation and the run worked
    return run, row


def attack_log(run: Run, row: dict[str, Any], name: str = "attack.log") -> str:
    """``/workspace/<name>`` as exported: the member of submission.tar.gz (the agent wrote
    it; the workspace reaches the host only inside that archive)."""
    import tarfile

    with tarfile.open(run.root / row["output_paths"]["submission"], "r:gz") as tar:
        member = tar.getmember(name)
        assert member.isreg() and member.size <= 1_000_000, member
        data = tar.extractfile(member)
        assert data is not None
        return data.read().decode(errors="replace")


def _leaks(data: bytes, ref: Reference) -> bool:
    return hashlib.sha256(data).hexdigest() == ref.sha256 or REFERENCE_MARKER in data


def assert_no_reference_bytes(run: Run, row: dict[str, Any], ref: Reference) -> int:
    """No file under the run root, nor any member of the submission, holds the reference
    (its sha256, or its read-only data as a dump would). Returns the number of files seen."""
    seen = 0
    leaks: list[str] = []
    for dirpath, dirnames, filenames in os.walk(run.root, followlinks=False):
        for name in filenames + dirnames:
            path = Path(dirpath) / name
            st = path.lstat()
            if not stat.S_ISREG(st.st_mode):
                continue
            seen += 1
            if _leaks(path.read_bytes(), ref):
                leaks.append(str(path.relative_to(run.root)))
    submission = run.root / row["output_paths"]["submission"]
    with tarfile.open(submission, "r:gz") as tar:
        for member in tar.getmembers():
            if member.isfile():
                seen += 1
                handle = tar.extractfile(member)
                assert handle is not None
                if _leaks(handle.read(), ref):
                    leaks.append(f"submission.tar.gz:{member.name}")
    assert leaks == [], f"reference bytes reached the host: {leaks}"
    return seen
