"""The oracle on a real ProgramBench task: skipped before any image is pulled (the CI matrix
used to pull ~50 multi-GB images per shard only to record ``skipped``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.docker


def test_oracle_skips_a_real_task_without_pulling(tmp_path: Path) -> None:
    # --pull never: had the runner tried to resolve the task's image (absent here), the row
    # would be an infrastructure failure (image missing), not the oracle's skip.
    run_root = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "benchmarks/programbench", "-k", "cheat__cheat",
         "--agent", "oracle", "--pull", "never", "--run-root", str(run_root), "-q",
         "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:]
    [row] = [json.loads(line) for line in (run_root / "result_index.jsonl").read_text()
             .splitlines()]
    assert (row["outcome"], row["reason_code"]) == ("skipped", "oracle_unavailable")
    assert "image" not in row["details"].get("engine", {})  # no image was resolved for it
    images = subprocess.run(["docker", "images", "-q", "--filter", "reference=*cheat*"],
                            capture_output=True, text=True, check=True).stdout.split()
    assert images == []
