"""Issue 43 (7): ``monitor.json`` records progress (done, running, left), disk headroom and
the stop reason, refreshed while the run goes and written atomically; with a budget, the
budget's monitor carries the same progress."""

from __future__ import annotations

import json
import os
import signal

from tests.support.suite import Run, wait_for

TASKS = [{"id": "q", "work": "succeed", "count": 3},
         {"id": "z", "work": "sleep", "seconds": 30, "then": "succeed"}]


def _monitor(root) -> dict | None:
    try:
        return json.loads((root / "monitor.json").read_text())
    except (OSError, ValueError):
        return None


def test_monitor_shows_progress_while_the_run_goes_and_the_stop_at_its_end(suite):
    suite.tasks(TASKS)
    proc, root = suite.start("--selftest-monitor")
    seen: list[dict] = []

    def running() -> bool:
        m = _monitor(root)
        if m is not None and m.get("progress"):
            seen.append(m)
            return m["progress"]["running"] == 1 and m["progress"]["done"] == 3
        return False

    wait_for(running, timeout=60, interval=0.1)
    live = seen[-1]
    assert live["progress"] == {"selected": 4, "done": 3, "running": 1, "left": 0,
                                "by_outcome": {"scored": 3}}
    assert live["finished"] is False and live["disk"]["free_bytes"] > 0
    os.killpg(proc.pid, signal.SIGINT)
    proc.communicate(timeout=60)
    end = _monitor(root)
    assert end is not None and end["finished"] is True and end["runner_exit_code"] == 3
    assert end["stop_reason"] and end["progress"]["left"] == 0
    assert end["progress"]["done"] == 4 and end["progress"]["running"] == 0
    assert Run.of(root).manifest["exit_code"] == 3


def test_no_monitor_unless_asked_and_none_for_a_dry_run(suite):
    suite.tasks([{"id": "q", "work": "succeed"}])
    assert not (suite.run().root / "monitor.json").exists()
    assert not (suite.run("--selftest-monitor", "--dry-run").root / "monitor.json").exists()
    done = _monitor(suite.run("--selftest-monitor").root)
    assert done is not None and done["progress"]["done"] == 1
