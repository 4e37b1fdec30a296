"""Helpers of the copy-out attack tests: an adversarial ``--agent command`` on the
ProgramBench fixture, and what to measure on the host afterwards."""

from __future__ import annotations

import base64
import io
import os
import stat
import tarfile
from pathlib import Path
from typing import Any

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.fixture import ensure_fixture
from tests.support.suite import Run, run_pytest

TARGET = "benchmarks/programbench"


def oracle_script() -> str:
    """Shell that writes the fixture's correct solution into the current directory."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for rel, data in sorted(ensure_fixture().oracle_contents().items()):
            info = tarfile.TarInfo(rel)
            info.size, info.mode = len(data), 0o755 if rel.endswith(".sh") else 0o644
            tar.addfile(info, io.BytesIO(data))
    blob = base64.b64encode(buf.getvalue()).decode()
    return f"echo {blob} | base64 -d | tar -xzf -"


def attack(tmp_path: Path, name: str, command: str, *args: str) -> Run:
    """One run of the fixture with ``command`` as the agent (bash, in /workspace)."""
    return run_pytest(TARGET, tmp_path / name, "--pb-fixtures", "-k", "calculator", "--agent", "command",
                      "--agent-command", command, *args)


def row(run: Run) -> dict[str, Any]:
    return run.latest[FIXTURE_ID]


def instance_dir(run: Run) -> Path:
    return run.root / "programbench" / FIXTURE_ID


def disk_use(root: Path) -> int:
    """Bytes allocated under ``root`` (``du``: blocks, links not followed)."""
    total = 0
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            total += os.lstat(os.path.join(folder, name)).st_blocks * 512
    return total


def special_entries(root: Path) -> list[str]:
    """Symlinks, FIFOs, sockets and devices under ``root`` (nothing should be there)."""
    out = []
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            mode = os.lstat(os.path.join(folder, name)).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                out.append(os.path.relpath(os.path.join(folder, name), root))
    return out


def files_containing(root: Path, needle: bytes) -> list[str]:
    """Regular files under ``root`` whose bytes contain ``needle`` (never follows links)."""
    hits = []
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if stat.S_ISREG(os.lstat(path).st_mode):
                with open(path, "rb") as fh:
                    if needle in fh.read():
                        hits.append(os.path.relpath(path, root))
    return hits
