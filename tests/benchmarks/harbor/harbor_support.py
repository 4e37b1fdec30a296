"""Running the Harbor benchmark in tests: its task folders, built from the local base."""

from __future__ import annotations

from pathlib import Path

import docker

from harness.sandbox.images.build import base_recipe
from tests.support.forkrun import ForkedProcess
from tests.support.suite import (
    FORK_SERVER,
    QUIET_PLUGINS,
    REPO_ROOT,
    Run,
    private_basetemp,
    run_env,
    run_pytest,
)

TARGET = "benchmarks/harbor"
DATA = Path(__file__).resolve().parents[2] / "data" / "harbor"
TASKS = DATA / "tasks"
UPSTREAM = DATA / "upstream" / "hello-workdir"


def map_args() -> list[str]:
    """The test folders say ``FROM harbor-test-base``, Harbor's example ``FROM ubuntu:24.04``:
    both are built from the local base image (no registry here)."""
    base = base_recipe().tag
    return ["--harbor-image-map", f"harbor-test-base={base}",
            "--harbor-image-map", f"ubuntu:24.04={base}"]


def run_harbor(root: Path, *args: str, tasks: Path = TASKS, timeout: float = 600) -> Run:
    return run_pytest(TARGET, root, "--harbor-tasks", str(tasks), *map_args(), *args,
                      timeout=timeout)


def rows(run: Run) -> dict[str, dict]:
    return {k: dict(v) for k, v in run.latest.items()}


def no_containers(run_id: str) -> None:
    client = docker.from_env()
    left = client.containers.list(all=True, filters={"label": f"harness.run={run_id}"})
    assert left == [], [c.name for c in left]


def start_harbor(root: Path, *args: str, tasks: Path = TASKS) -> ForkedProcess:
    """Start a Harbor run and return at once (its own session: signal its process group)."""
    out = root.parent / f".{root.name}-output.txt"
    return FORK_SERVER.spawn("pytest", [*QUIET_PLUGINS, "-q", TARGET, "--run-root", str(root),
                                        *private_basetemp(root.parent), "--harbor-tasks",
                                        str(tasks), *map_args(), *args],
                             REPO_ROOT, run_env(), out)
