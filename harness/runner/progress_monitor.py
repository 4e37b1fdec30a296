"""``monitor.json`` progress: units done, running and left, refreshed while the run goes.

With a budget, the budget supervisor owns ``monitor.json`` (spend, meter, disk, stop reason)
and asks :meth:`ProgressMonitor.progress` on every tick. Without one, a benchmark that asks
for the file (``BenchmarkAdapter.writes_monitor``: Cowork Bench, whose specification lists
it) gets it from here: progress, disk headroom and the stop reason, written atomically at
most once a second while rows arrive and instances start, and once more when the run ends.
A failed write is a diagnostic on stderr; the run goes on.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path

from harness.budget.disk import check_disk
from harness.budget.models import Monitor, MonitorMeter, RunProgress
from harness.budget.monitor import MONITOR_FILE, write_monitor
from harness.core.models import TaskRow
from harness.run.ledger import report_write_failure

MIN_INTERVAL_S = 1.0


def run_progress(selection: list[str], rows: Mapping[str, TaskRow],
                 running: Mapping[str, object]) -> RunProgress:
    """Done: a selected unit with a row that is not running again; running: started and not
    done; left: the rest."""
    done = [k for k in selection if k in rows and k not in running]
    busy = sum(1 for k in selection if k in running)
    outcomes = Counter(rows[k].outcome.value for k in done)
    return RunProgress(selected=len(selection), done=len(done), running=busy,
                       left=len(selection) - len(done) - busy,
                       by_outcome=dict(sorted(outcomes.items())))


class ProgressMonitor:
    """Writes ``monitor.json`` for a run without a budget supervisor (see the module)."""

    def __init__(self, run_id: str, run_root: Path,
                 progress: Callable[[], RunProgress | None]) -> None:
        self.run_id = run_id
        self.run_root = Path(run_root)
        self.progress = progress
        self.last = 0.0
        self.lock = threading.Lock()
        self.timer: threading.Timer | None = None
        self.closed = False

    def touch(self) -> None:
        """Something moved: write now, or (the last write under a second old) once that
        second is over, so the file never lags the run by more than a second."""
        wait = self.last + MIN_INTERVAL_S - time.monotonic()
        if wait <= 0:
            self.write()
            return
        with self.lock:
            if self.timer is not None or self.closed:
                return
            self.timer = threading.Timer(wait, self._deferred)
            self.timer.daemon = True
            self.timer.start()

    def _deferred(self) -> None:
        with self.lock:
            self.timer = None
            if self.closed:
                return
        try:
            self.write()
        except Exception as exc:  # a diagnostic from a timer thread: never raised
            report_write_failure(str(self.run_root / MONITOR_FILE), OSError(str(exc)))

    def close(self, *, stop_reason: str | None, exit_code: int) -> None:
        """The run ended: no deferred write after this last one."""
        with self.lock:
            self.closed = True
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
        self.write(stop_reason=stop_reason, exit_code=exit_code)

    def write(self, *, stop_reason: str | None = None, exit_code: int | None = None) -> None:
        self.last = time.monotonic()
        monitor = Monitor(
            run_id=self.run_id, observed_at_unix=time.time(), controller_pid=os.getpid(),
            meter=MonitorMeter(source=None, blindness_sec=0.0, confirmed_age_sec=None,
                               last_usage=None),
            progress=self.progress(), stop_reason=stop_reason,
            finished=exit_code is not None, runner_exit_code=exit_code)
        try:
            monitor.disk = check_disk(self.run_root, None)
        except OSError:
            monitor.disk = None
        try:
            write_monitor(self.run_root, monitor)
        except OSError as exc:  # a diagnostic: valid work continues
            report_write_failure(str(self.run_root / MONITOR_FILE), exc)
