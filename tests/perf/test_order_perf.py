"""Longest first (issue 15 target: within 1.10x of the longest-first bound).

16 selftest instances (8 x 1 s, 4 x 3 s, 2 x 6 s, 2 x 10 s, listed short to long) at ``-n 4``,
in one session: plain pytest-xdist on the same sleeps (no harness instances), the harness in the given
order (its ledger gives the durations), and the harness with ``--durations-from`` that run
(longest first by default). The figure is the instance phase of the last run (first start to
last end, from its ledger) against the bound max(longest, total / 4) of its own measured
durations (13 s plus per-instance overhead).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.suite import Suite

TASKS = ([{"id": f"s1-{i}", "work": "sleep", "seconds": 1} for i in range(8)]
         + [{"id": f"s3-{i}", "work": "sleep", "seconds": 3} for i in range(4)]
         + [{"id": f"s6-{i}", "work": "sleep", "seconds": 6} for i in range(2)]
         + [{"id": f"s10-{i}", "work": "sleep", "seconds": 10} for i in range(2)])
PLAIN = '''
import time
import pytest

@pytest.mark.parametrize("seconds", [1] * 8 + [3] * 4 + [6] * 2 + [10] * 2)
def test_sleep(seconds):
    start = time.time()
    time.sleep(seconds)
    with open("spans.txt", "a") as fh:
        fh.write(f"{start} {time.time()}\\n")
'''


def rows(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "result_index.jsonl").read_text().splitlines()]


def phase(rows_: list[dict]) -> tuple[float, float]:
    """(instance phase wall time, longest-first bound) of one run's rows."""
    starts = [r["ts_unix"] - r["duration_s"] for r in rows_]
    ends = [r["ts_unix"] for r in rows_]
    durations = [r["duration_s"] for r in rows_]
    return max(ends) - min(starts), max(max(durations), sum(durations) / 4)


def test_longest_first_is_within_ten_percent_of_the_bound(tmp_path: Path, perf_goal: Any) -> None:
    plain_dir = tmp_path / "plain"
    plain_dir.mkdir()
    (plain_dir / "test_plain.py").write_text(PLAIN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           "-n", "4", str(plain_dir / "test_plain.py")], cwd=plain_dir,
                          capture_output=True, text=True)
    plain_wall = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stdout + proc.stderr
    spans = [tuple(map(float, line.split()))
             for line in (plain_dir / "spans.txt").read_text().splitlines()]
    plain_phase = max(b for _, b in spans) - min(a for a, _ in spans)

    (tmp_path / "suite").mkdir()
    suite = Suite(tmp_path / "suite")
    suite.tasks(TASKS)
    given = suite.run("-n", "4", "--order", "given")
    assert given.rc == 0, given.out
    given_phase, _ = phase(rows(given.root))
    t0 = time.perf_counter()
    ordered = suite.run("-n", "4", "--durations-from", str(given.root))
    ordered_wall = time.perf_counter() - t0
    assert ordered.rc == 0, ordered.out
    ordered_phase, bound = phase(rows(ordered.root))
    print(f"\nplain xdist {plain_phase:.1f}s (wall {plain_wall:.1f}s); harness given order {given_phase:.1f}s; "
          f"longest first {ordered_phase:.1f}s (wall {ordered_wall:.1f}s); bound {bound:.1f}s; "
          f"ratio {ordered_phase / bound:.3f}")
    perf_goal("longest_first_vs_bound", ordered_phase / bound, 1.10)
    perf_goal("longest_first_vs_given_order", ordered_phase / given_phase, 1.0, op="<")
    perf_goal("longest_first_vs_plain_xdist", ordered_phase / plain_phase, 1.0, op="<")
