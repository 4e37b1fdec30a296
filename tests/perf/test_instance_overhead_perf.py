"""What the harness adds per instance, and what a resume adds, on 2,000 trivial items (issue 29).

* Per-instance overhead: a whole ``pytest`` run of 2,000 ``succeed`` selftest instances (a run
  root, its manifest, plan and ledger: one fsynced row each) against a whole plain ``pytest``
  run of 2,000 trivial parametrized tests without the harness plugin; the figure is the
  median of the rounds' paired differences over 2,000, in ms (goal <= 2.5 ms).
* Resume: ``--resume-from`` a settled 2,000-row run (every instance carried: its row
  written to the new root's ledger, all in one append and one fsync, and to its instance
  folder) against ``--collect-only`` of the same 2,000 instances; the figure is the median
  paired difference, in s (goal <= 1 s).

Rounds are interleaved so load drifts hit both sides of a pair alike; every process is a
fresh interpreter on a warm bytecode cache (one warm-up run each).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ITEMS = 2000
ROUNDS = int(os.environ.get("HARNESS_PERF_OVERHEAD_ROUNDS", "3"))
OVERHEAD_GOAL_MS = 2.5
RESUME_GOAL_S = 1.0

SUITE_TEST = '''
import pytest
from harness.testing.adapter import run_selftest_instance

pytestmark = pytest.mark.harness_benchmark("selftest")


def test_selftest(harness_instance):
    run_selftest_instance(harness_instance)
'''

PLAIN_TEST = f'''
import pytest


@pytest.mark.parametrize("instance", [f"t-{{i:04d}}" for i in range({ITEMS})])
def test_plain(instance):
    assert instance
'''


def selftest_suite(root: Path) -> tuple[Path, dict[str, str]]:
    suite = root / "selftest"
    suite.mkdir()
    (suite / "conftest.py").write_text('pytest_plugins = ["harness.testing.plugin"]\n')
    (suite / "test_selftest.py").write_text(SUITE_TEST)
    tasks = suite / "tasks.json"
    tasks.write_text(json.dumps([{"id": "t", "work": "succeed", "count": ITEMS}]))
    return suite, dict(os.environ, HARNESS_SELFTEST_TASKS=str(tasks))


def timed(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           *args], cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return elapsed


def rows(run_root: Path) -> int:
    return sum(1 for _ in (run_root / "result_index.jsonl").open())


def paired(first: Callable[[int], float], second: Callable[[int], float]) -> list[float]:
    """``first(i) - second(i)`` over the rounds, after one warm-up of each."""
    first(-1)
    second(-1)
    return [first(i) - second(i) for i in range(ROUNDS)]


def test_per_instance_overhead_against_plain_pytest(tmp_path: Path,
                                                    perf_goal: Callable[..., bool]) -> None:
    suite, env = selftest_suite(tmp_path)
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "test_plain.py").write_text(PLAIN_TEST)
    runs = tmp_path / "runs"

    def harness(i: int) -> float:
        return timed(["test_selftest.py", "--run-root", str(runs / f"r{i + 1}"),
                      "--harness-progress", "off", "--no-report"], suite, env)

    def baseline(i: int) -> float:
        return timed(["test_plain.py", "-p", "no:harness"], plain)

    diffs = paired(harness, baseline)
    assert rows(runs / "r1") == ITEMS  # every instance got its row
    per_item_ms = statistics.median(diffs) / ITEMS * 1000
    print(f"\nharness over plain pytest, {ITEMS} items, {ROUNDS} rounds: "
          f"{per_item_ms:.2f} ms per instance (paired differences "
          f"{', '.join(f'{d:.2f}s' for d in diffs)})")
    perf_goal("per_instance_overhead_ms", per_item_ms, OVERHEAD_GOAL_MS, unit="ms")


def test_resume_of_2000_rows_beyond_collection(tmp_path: Path,
                                               perf_goal: Callable[..., bool]) -> None:
    suite, env = selftest_suite(tmp_path)
    settled = tmp_path / "runs" / "settled"
    timed(["test_selftest.py", "--run-root", str(settled), "--harness-progress", "off",
           "--no-report"], suite, env)
    assert rows(settled) == ITEMS

    def resume(i: int) -> float:
        return timed(["test_selftest.py", "--resume-from", str(settled), "--run-root",
                      str(tmp_path / "runs" / f"resume{i + 1}"), "--harness-progress", "off",
                      "--no-report"], suite, env)

    def collection(i: int) -> float:
        return timed(["test_selftest.py", "--collect-only"], suite, env)

    diffs = paired(resume, collection)
    carried = [json.loads(line) for line in
               (tmp_path / "runs" / "resume1" / "result_index.jsonl").open()]
    assert len(carried) == ITEMS
    assert {r["reason_code"] for r in carried} == {"settled_in_ancestor"}
    # self-contained: every carried instance's folder holds its row too
    folders = tmp_path / "runs" / "resume1" / "selftest"
    assert sum(1 for d in folders.iterdir() if (d / "result_index.jsonl").is_file()) == ITEMS
    beyond_s = statistics.median(diffs)
    print(f"\nresume of {ITEMS} settled rows beyond collection, {ROUNDS} rounds: "
          f"{beyond_s:.2f}s (paired differences {', '.join(f'{d:.2f}s' for d in diffs)})")
    perf_goal("resume_2000_rows_beyond_collection_s", beyond_s, RESUME_GOAL_S, unit="s")
