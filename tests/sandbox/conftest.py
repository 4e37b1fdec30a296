"""Fixtures of the Docker tests: the real engine, the shared base image, a stand-in instance.

Nothing here skips: without a Docker daemon, debootstrap or gcc these tests error out.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from harness.sandbox.cleanup import leaked_resources, run_lock, sweep
from harness.sandbox.images.build import BuiltImage, base_recipe, ensure_image
from tests.sandbox.sandbox_support import new_run_id

PROTECTED_C = r"""
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "sleep") == 0) { sleep(120); return 0; }
    printf("reference output %d\n", argc);
    return 0;
}
"""


@dataclass
class StandInInstance:
    """TEST STAND-IN for the runner's ``harness_instance`` (harness.runner.instance.InstanceContext).

    Carries only what the sandbox fixtures read. It holds the run lock like a real
    controller would, so a concurrent ``sweep_stale`` elsewhere leaves its sandboxes alone.
    """

    run_id: str
    run_root: Path
    instance_id: str
    worker_id: str
    instance_dir: Path


@pytest.fixture(scope="session")
def worker_id_label(request: pytest.FixtureRequest) -> str:
    return str(getattr(request.config, "workerinput", {}).get("workerid", "main"))


@pytest.fixture
def harness_instance(tmp_path: Path, worker_id_label: str) -> Iterator[StandInInstance]:
    """Stand-in (see :class:`StandInInstance`); sweeps its run at teardown as a backstop."""
    run_root = tmp_path / "run"
    run_id = new_run_id("fx")
    inst = StandInInstance(
        run_id=run_id,
        run_root=run_root,
        instance_id="demo__inst-1",
        worker_id=worker_id_label,
        instance_dir=run_root / "instances" / "demo__inst-1",
    )
    inst.instance_dir.mkdir(parents=True)
    with run_lock(run_root).acquire(timeout=0):
        yield inst
    sweep(run_id)


@pytest.fixture(scope="session")
def docker_client(sandbox_client: docker.DockerClient) -> docker.DockerClient:
    return sandbox_client


@pytest.fixture(scope="session")
def base_image(docker_client: docker.DockerClient) -> BuiltImage:
    """The shared base image (built once per machine, ~1 min; then a tag lookup)."""
    return ensure_image(base_recipe(), client=docker_client)


@pytest.fixture
def run_root(tmp_path: Path) -> Path:
    root = tmp_path / "runroot"
    root.mkdir()
    return root


@pytest.fixture
def own_run(run_root: Path) -> Iterator[str]:
    """A fresh run id for a test that creates resources itself; swept (and checked) after."""
    run_id = new_run_id()
    with run_lock(run_root).acquire(timeout=0):
        yield run_id
    sweep(run_id)
    assert leaked_resources(run_id_prefix=run_id) == {
        "containers": [],
        "networks": [],
        "volumes": [],
    }


@pytest.fixture(scope="session")
def protected_elf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A static ELF (gcc -static) that runs in any container."""
    gcc = shutil.which("gcc")
    assert gcc, "gcc is needed to build the protected-artifact test binary: apt-get install gcc"
    out = tmp_path_factory.mktemp("elf")
    (out / "ref.c").write_text(PROTECTED_C)
    subprocess.run([gcc, "-static", "-O2", "-o", str(out / "ref"), str(out / "ref.c")], check=True)
    return out / "ref"
