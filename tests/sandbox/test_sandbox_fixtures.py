"""The sandbox pytest fixtures, run in a child pytest as a benchmark suite would use them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from harness.sandbox.cleanup import leaked_resources, sweep
from tests.sandbox.sandbox_support import new_run_id
from tests.support.suite import pytest_result

pytestmark = pytest.mark.docker

INNER_CONFTEST = """
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.sandbox.cleanup import run_lock

pytest_plugins = ["harness.runner.sandbox_fixtures"]


@dataclass
class StandInInstance:  # TEST STAND-IN for the runner's harness_instance
    run_id: str
    run_root: Path
    instance_id: str
    worker_id: str
    instance_dir: Path


@pytest.fixture
def harness_instance(tmp_path):
    root = Path(os.environ["INNER_RUN_ROOT"])
    with run_lock(root).acquire(timeout=0):
        yield StandInInstance(os.environ["INNER_RUN_ID"], root, "inner-1", "main", tmp_path)
"""

INNER_TEST = """
from pathlib import Path


def test_uses_a_sandbox(sandbox, harness_instance):
    Path(harness_instance.run_root, "container-id").write_text(sandbox.id)
    assert sandbox.exec("id -un").stdout == b"agent\\n"
"""


def _run_inner(
    tmp_path: Path, run_id: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    suite = tmp_path / "suite"
    suite.mkdir(exist_ok=True)
    (suite / "conftest.py").write_text(INNER_CONFTEST)
    (suite / "test_inner.py").write_text(INNER_TEST)
    root = tmp_path / "inner-run"
    root.mkdir(exist_ok=True)
    full_env = {**os.environ, "INNER_RUN_ROOT": str(root), "INNER_RUN_ID": run_id, **(env or {})}
    full_env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:harness",
            "-p",
            "no:cacheprovider",
            "-q",
            "-W",
            "default",
            *args,
            str(suite),
        ],
        cwd=suite,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _listed(client: docker.DockerClient, container_id: str) -> bool:
    return bool(client.api.containers(all=True, filters={"id": container_id}))


def test_sandbox_is_removed_at_teardown(docker_client: docker.DockerClient, tmp_path: Path) -> None:
    run_id = new_run_id("fxin")
    try:
        proc = _run_inner(tmp_path, run_id)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        container_id = (tmp_path / "inner-run" / "container-id").read_text()
        assert not _listed(docker_client, container_id)
    finally:
        sweep(run_id, client=docker_client)


def test_keep_sandboxes_keeps_them_and_names_the_sweep(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    run_id = new_run_id("fxkeep")
    try:
        proc = _run_inner(tmp_path, run_id, "--keep-sandboxes")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        container_id = (tmp_path / "inner-run" / "container-id").read_text()
        assert _listed(docker_client, container_id)
        pytest_result(proc.returncode, proc.stdout).stdout.fnmatch_lines([
            f"*UserWarning: --keep-sandboxes: kept *; remove with `harness sweep --run {run_id}`"])
    finally:
        sweep(run_id, client=docker_client)
    assert leaked_resources(docker_client, run_id_prefix=run_id)["containers"] == []


def test_docker_unavailable_is_an_infra_error_not_a_skip(tmp_path: Path) -> None:
    run_id = new_run_id("fxdown")
    proc = _run_inner(
        tmp_path, run_id, "-rA", env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    )
    out = proc.stdout
    assert proc.returncode == 1, out
    result = pytest_result(proc.returncode, out)
    result.assert_outcomes(errors=1)
    result.stdout.no_fnmatch_line("*skipped*")
    result.stdout.fnmatch_lines(["*DockerUnavailable: cannot reach the Docker daemon (*"])


LEAKY_TEST = """
import os
from pathlib import Path

import pytest

from harness.sandbox import Sandbox, SandboxSpec


@pytest.mark.docker
def test_leaks(tmp_path):
    image = os.environ["BASE_IMAGE"]
    inside = SandboxSpec(image=image, run_id=os.environ["LEAK_IN"], instance_id="x", run_root=tmp_path / "run")
    outside = SandboxSpec(image=image, run_id=os.environ["LEAK_OUT"], instance_id="x",
                          run_root=Path(os.environ["OUTSIDE_ROOT"]))
    Sandbox.create(inside)
    Sandbox.create(outside)
"""


def test_session_end_check_flags_this_sessions_leaks_only(
    docker_client: docker.DockerClient, base_image, tmp_path: Path
) -> None:
    suite = tmp_path / "leaky"
    suite.mkdir()
    (suite / "conftest.py").write_text((Path(__file__).parents[1] / "conftest.py").read_text())
    (suite / "test_leaky.py").write_text(LEAKY_TEST)
    leak_in, leak_out = new_run_id("leakin"), new_run_id("leakout")
    env = {
        **os.environ,
        "BASE_IMAGE": base_image.image_id,
        "LEAK_IN": leak_in,
        "LEAK_OUT": leak_out,
        "OUTSIDE_ROOT": str(tmp_path / "elsewhere"),
    }
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:harness",
                "-p",
                "no:cacheprovider",
                "-q",
                "--basetemp",
                str(tmp_path / "bt"),
                str(suite),
            ],
            cwd=suite,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        out = proc.stdout
        assert proc.returncode == 1, out + proc.stderr
        result = pytest_result(proc.returncode, out)
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines([f"*LEAKED Docker resources of this test session (1): *({leak_in}*)"])
        result.stdout.no_fnmatch_line(f"*{leak_out}*")
        assert leaked_resources(docker_client, run_id_prefix=leak_in)["containers"] == [], (
            "swept after reporting"
        )
        assert len(leaked_resources(docker_client, run_id_prefix=leak_out)["containers"]) == 1
    finally:
        sweep(leak_in, client=docker_client)
        sweep(leak_out, client=docker_client)
