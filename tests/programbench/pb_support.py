"""Helpers of the ProgramBench adapter tests."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.submission import SubmissionInfo, build_submission


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
