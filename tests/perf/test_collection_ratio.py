"""Collection of the 201 ProgramBench items against a plain parametrized file (issue 17).

Both are whole ``pytest --collect-only`` processes on the same interpreter, bytecode cached
(one warm-up run each), timed in interleaved rounds; the figure is the ratio of the medians.
The plain file runs without the harness plugin (``-p no:harness``): the baseline is pytest
itself, so everything the harness adds to collection counts against the target (<= 1.3x).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
ITEMS = 201
ROUNDS = 7
TARGET = 1.3

PLAIN_TEST = f'''
import pytest


@pytest.mark.parametrize("instance", [f"instance-{{i}}" for i in range({ITEMS})])
def test_plain(instance):
    assert instance
'''


def collect(args: list[str], cwd: Path) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", *args],
                          cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return elapsed, proc.stdout


def collected(stdout: str) -> int:
    return sum(1 for line in stdout.splitlines() if "::" in line)


def test_programbench_collection_ratio(tmp_path: Path, perf_goal: Any) -> None:
    (tmp_path / "test_plain.py").write_text(PLAIN_TEST)
    programbench = ["benchmarks/programbench"]
    plain = ["test_plain.py", "-p", "no:harness"]
    # warm-up: bytecode cached for both, and the item counts checked
    _, pb_out = collect(programbench, REPO)
    _, plain_out = collect(plain, tmp_path)
    assert collected(plain_out) == ITEMS
    assert collected(pb_out) >= ITEMS - 1, pb_out[-500:]
    pb_times: list[float] = []
    plain_times: list[float] = []
    for _ in range(ROUNDS):
        pb_times.append(collect(programbench, REPO)[0])
        plain_times.append(collect(plain, tmp_path)[0])
    pb_median = statistics.median(pb_times)
    plain_median = statistics.median(plain_times)
    ratio = pb_median / plain_median
    print(f"\ncollect ProgramBench ({collected(pb_out)} items): median {pb_median:.3f}s; "
          f"plain file ({ITEMS} items): median {plain_median:.3f}s; ratio {ratio:.2f} "
          f"(target <= {TARGET})")
    perf_goal("programbench_collection_vs_plain", ratio, TARGET)
