"""Helpers of the ProgramBench adapter tests."""

from __future__ import annotations

import contextlib
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.submission import SubmissionInfo, build_submission
from harness.sandbox.cleanup import run_lock
from harness.sandbox.container import Sandbox, SandboxSpec
from harness.sandbox.protected import PROTECTED_SANDBOX_CAP_DROP, PROTECTED_SANDBOX_ULIMITS


def make_run(src_root: Path, workspace: Path, instance_id: str = FIXTURE_ID) -> SubmissionInfo:
    """``<src_root>/<iid>/submission.tar.gz`` packed from ``workspace``."""
    return build_submission(workspace, src_root / instance_id / "submission.tar.gz")


def unique_name(prefix: str = "pbtest") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def docker_run(
    image: str, script: str, *, user: str = "root", timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """One-shot ``docker run --rm`` (no harness labels: nothing for the run sweeper)."""
    return subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--name",
            unique_name(),
            "--network",
            "none",
            "-u",
            user,
            image,
            "bash",
            "-c",
            script,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@contextlib.contextmanager
def cleanroom_sandbox(image: str, run_root: Path) -> Iterator[Sandbox]:
    """A sandbox made like the runner's (agent user, no network, protected-program options)."""
    spec = SandboxSpec(
        image=image, run_id=unique_name("hxt-pb"), instance_id=FIXTURE_ID, run_root=run_root,
        user="agent", network="none", cap_drop=PROTECTED_SANDBOX_CAP_DROP,
        ulimits=PROTECTED_SANDBOX_ULIMITS, ttl_s=600,
    )
    with run_lock(run_root).acquire(timeout=0), Sandbox.create(spec) as sandbox:
        yield sandbox
