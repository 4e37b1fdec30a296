"""``--runtime runsc``: the agent's sandbox under gVisor (Debian's ``runsc``, registered with
the Docker daemon by ``scripts/setup.sh``), scored by the real ``programbench`` CLI.

The official eval's own containers are the CLI's and stay on the daemon's default runtime.
"""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from tests.support.suite import run_pytest

pytestmark = pytest.mark.docker

TARGET = "benchmarks/programbench"
RUNTIME = "runsc"
COWORK_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "cowork_mini"


def test_programbench_refuses_gvisor_which_ignores_the_reference_launchers_setuid(
    tmp_path: Path,
) -> None:
    # Measured: under Debian's runsc a setuid program keeps the caller's euid (AT_SECURE 0),
    # so the reference's launcher could not open the protected program: refused up front.
    run = run_pytest(TARGET, tmp_path / "runsc", "--pb-fixtures", "-k", "calculator", "--agent", "oracle",
                     "--runtime", RUNTIME)
    assert run.rc == 2, run.out
    assert run.manifest["refusal"]["reason"] == "runtime_unsupported"
    assert "setuid" in run.manifest["refusal"]["message"]
    assert not run.latest  # nothing ran


@pytest.mark.slow
def test_setuid_is_ignored_under_gvisor(tmp_path: Path) -> None:
    """The fact the refusal rests on, checked on this machine's runsc."""
    client = docker.from_env()
    from harness.sandbox.images.build import base_recipe, ensure_image

    image = ensure_image(base_recipe()).image_id
    script = ("cp /usr/bin/id /tmp/id && chown 1999 /tmp/id && chmod 4755 /tmp/id && "
              "runuser -u agent -- /tmp/id -u")
    for runtime, expected in ((None, b"1999"), (RUNTIME, b"1000")):
        out = client.containers.run(image, ["sh", "-c", script], runtime=runtime,
                                    network_mode="none", remove=True)
        assert out.strip() == expected, (runtime, out)


@pytest.mark.slow
def test_cowork_agent_container_runs_under_gvisor(tmp_path: Path) -> None:
    run = run_pytest("benchmarks/cowork_bench", tmp_path / "cowork", "--cowork-root",
                     str(COWORK_FIXTURE), "--cowork-allow-dirty-bench", "-k", "excel-sales-summary",
                     "--agent", "command", "--agent-command", "dmesg > kernel.txt",
                     "--runtime", RUNTIME, timeout=600)
    row = run.latest["excel-sales-summary"]
    assert row["outcome"] == "scored" and row["reason_code"] == "verifier_failed", row
    kernel = run.root / row["output_paths"]["workspace"] / "kernel.txt"
    assert "Starting gVisor" in kernel.read_text(), kernel.read_text()[:500]
    assert run.manifest["config"]["sandbox.runtime"] == RUNTIME


def test_unregistered_runtime_is_refused_before_any_sandbox(tmp_path: Path) -> None:
    run = run_pytest(TARGET, tmp_path / "bogus", "--pb-fixtures", "-k", "calculator", "--agent", "oracle",
                     "--runtime", "no-such-runtime")
    assert run.rc == 2, run.out
    run.result.stdout.fnmatch_lines(["*--runtime no-such-runtime: the Docker daemon has no runtime of that name*"])
    refusal = run.manifest["refusal"]
    assert refusal["reason"] == "runtime_unavailable", refusal
    assert run.rows == []
