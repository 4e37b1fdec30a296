"""Signals: graceful stop on the first SIGINT/SIGTERM, rows for every instance, exit 3."""

from __future__ import annotations

import json
import os
import signal
import time

from tests.support.suite import Run, finish, pytest_result, wait_for

SLOW = [{"id": "s", "work": "sleep", "seconds": 4, "count": 6}]


def started(root, n=1):
    path = root / "selftest_executions.log"
    return path.exists() and len(path.read_text().splitlines()) >= n


def test_sigterm_stops_gracefully(suite, mode):
    suite.tasks(SLOW)
    proc, root = suite.start(*mode)
    wait_for(lambda: started(root, 2 if mode else 1))
    os.kill(proc.pid, signal.SIGTERM)
    out = finish(proc)
    assert proc.returncode == 3, out
    manifest = json.loads((root / "run_manifest.json").read_text())
    assert manifest["outcome"] == "stopped" and manifest["exit_code"] == 3
    assert manifest["stop_reason"] == "signal_15"
    rows = Run.of(root).latest
    assert len(rows) == 6, out
    interrupted = [r for r in rows.values() if r["reason_code"] == "interrupted:signal_15"]
    assert len(interrupted) == (2 if mode else 1)
    assert all(r["status"] == "infra_failed" for r in interrupted)
    blocked = [r for r in rows.values() if r["status"] == "blocked"]
    assert len(blocked) == 6 - len(interrupted)
    pytest_result(proc.returncode, out).stdout.fnmatch_lines([
        "outcome stopped, exit status 3, stop reason signal_15",
        f"run root {root}",
        f"resume with: pytest *--resume-from={root}",
    ])


def test_sigint_to_the_process_group(suite):
    suite.tasks(SLOW)
    proc, root = suite.start("-n", "2")
    wait_for(lambda: started(root, 2))
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    out = finish(proc)
    assert proc.returncode == 3, out
    rows = Run.of(root).rows
    assert len({r["instance_id"] for r in rows}) == 6
    assert {r["reason_code"] for r in rows} <= {"interrupted:signal_2", "signal_2"}


def test_second_signal_exits_at_once(suite):
    (suite.path / "conftest.py").write_text(
        'pytest_plugins = ["harness.testing.plugin"]\n'
        "import time, pytest\n"
        "@pytest.fixture(autouse=True)\n"
        "def _slow_teardown(harness_instance):\n"
        "    yield\n"
        "    time.sleep(30)\n"
    )
    suite.tasks(SLOW)
    proc, root = suite.start()
    wait_for(lambda: started(root, 1))
    os.kill(proc.pid, signal.SIGTERM)
    time.sleep(0.5)  # now in the 30 s teardown, which the first signal must not interrupt
    assert proc.poll() is None
    os.kill(proc.pid, signal.SIGTERM)
    finish(proc, timeout=10)  # well before the 30 s teardown would end
    assert proc.returncode == 3
    manifest = json.loads((root / "run_manifest.json").read_text())
    assert manifest["outcome"] == "stopped" and manifest["exit_code"] == 3


def test_sigkill_then_resume_runs_each_instance_once(suite):
    suite.tasks([{"id": "k", "work": "sleep", "seconds": 0.2, "count": 10}])
    proc, root = suite.start("-n", "2")
    wait_for(lambda: len(Run.of(root).rows) >= 3, timeout=60)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    first_rows = Run.of(root).latest
    assert len(first_rows) < 10, "the kill must land mid-run"
    manifest = json.loads((root / "run_manifest.json").read_text())
    assert manifest["exit_code"] is None  # never finalized: SIGKILL leaves no chance
    second = suite.run("-n", "2", "--resume-from", str(root))
    assert second.rc == 0, second.out
    rows = second.latest
    assert len(rows) == 10
    for iid, row in first_rows.items():
        assert rows[iid]["outcome"] == "carried_forward"
        assert rows[iid]["carried_from"] == row["run_id"]
    reran = second.executions()
    assert sorted(reran) == sorted(set(rows) - set(first_rows))
    assert len(reran) == len(set(reran))
