"""Live progress of a run, driven by the controller's hooks (works under ``-n N``).

On a terminal it draws a rich Live panel; otherwise (CI logs) it prints one plain line per
event, at most one every ``min_interval`` seconds, and always a final line on ``close``::

    [harness] 12/200 done (completed 9, failed 2, infra_failed 1) running 4 (longest gw1
    pb__x 12m03s) spent $3.20 reserved $40.00 ETA 1h12m
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from harness.core.models import Outcome, TaskRow
from reports import fmt
from reports.stats import median

PREFIX = "[harness]"
CARRIED = "carried"
MAX_RUNNING_SHOWN = 12


@dataclass(frozen=True)
class Running:
    key: str
    worker: str
    started: float
    elapsed_s: float


@dataclass(frozen=True)
class Snapshot:
    total: int
    done: int
    counts: list[tuple[str, int]]  # most frequent first
    running: list[Running]  # longest first
    spent_usd: float | None
    reserved_usd: float | None
    eta_s: float | None


class Progress:
    """Progress of one run. ``t`` and ``clock`` share a time base (unix seconds by default)."""

    def __init__(
        self,
        total: int,
        stream: TextIO | None = None,
        is_tty: bool | None = None,
        *,
        min_interval: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.total = total
        self.stream: TextIO = stream if stream is not None else sys.stdout
        self.is_tty = self.stream.isatty() if is_tty is None else is_tty
        self.min_interval = min_interval
        self.clock = clock
        self._lock = threading.RLock()
        self._running: dict[str, tuple[str, float]] = {}
        self._status: dict[str, str] = {}
        self._activity: dict[str, str] = {}  # worker -> what it does now (e.g. an image pull)
        self._durations: list[float] = []
        self._peak = 0
        self._spent: float | None = None
        self._reserved: float | None = None
        self._last_emit: float | None = None
        self._pending = False
        self._closed = False
        self._live: Live | None = None

    # -- events -------------------------------------------------------------------------
    def instance_started(self, key: str, worker: str, t: float | None = None) -> None:
        with self._lock:
            self._running[key] = (worker, self.clock() if t is None else t)
            self._peak = max(self._peak, len(self._running))
        self._event()

    def row_written(self, row: TaskRow) -> None:
        with self._lock:
            self._running.pop(row.key, None)
            carried = row.outcome is Outcome.CARRIED or row.carried_from is not None
            self._status[row.key] = CARRIED if carried else row.status
            if not carried and row.duration_s is not None:
                self._durations.append(row.duration_s)
        self._event()

    def set_spend(self, spent_usd: float | None, reserved_usd: float | None) -> None:
        with self._lock:
            self._spent, self._reserved = spent_usd, reserved_usd
        self._event()

    def set_activity(self, activity: dict[str, str]) -> None:
        """What workers are doing besides running agents (image pulls): shown until gone."""
        with self._lock:
            changed = activity != self._activity
            self._activity = dict(activity)
        if changed:
            self._event()

    def activity(self) -> dict[str, str]:
        with self._lock:
            return dict(self._activity)

    # -- views --------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        with self._lock:
            now = self.clock()
            running = sorted(
                (Running(k, w, s, max(now - s, 0.0)) for k, (w, s) in self._running.items()),
                key=lambda r: (-r.elapsed_s, r.key),
            )
            counts = sorted(Counter(self._status.values()).items(), key=lambda kv: (-kv[1], kv[0]))
            done = len(self._status)
            return Snapshot(
                total=self.total,
                done=done,
                counts=counts,
                running=running,
                spent_usd=self._spent,
                reserved_usd=self._reserved,
                eta_s=self._eta(done, running),
            )

    def _eta(self, done: int, running: list[Running]) -> float | None:
        remaining = max(self.total - done, 0)
        if remaining == 0:
            return 0.0
        typical = median(self._durations)
        if typical is None:
            return None
        slots = max(self._peak, len(running), 1)
        queued = max(remaining - len(running), 0)
        work = sum(max(typical - r.elapsed_s, 0.0) for r in running) + queued * typical
        return work / slots

    def line(self) -> str:
        text = format_line(self.snapshot())
        activity = self.activity()
        if activity:
            text += " | " + "; ".join(f"{w} {a}" for w, a in sorted(activity.items()))
        return text

    # -- output -------------------------------------------------------------------------
    def _event(self) -> None:
        if self._closed:
            return
        if self.is_tty:
            self._ensure_live()
            return
        now = self.clock()
        with self._lock:
            due = self._last_emit is None or now - self._last_emit >= self.min_interval
            self._pending = not due
        if due:
            self._emit(now)

    def _emit(self, now: float) -> None:
        text = self.line()
        with self._lock:
            self._last_emit = now
            self._pending = False
            self.stream.write(text + "\n")
            self.stream.flush()

    def _ensure_live(self) -> None:
        if self._live is None:
            console = Console(file=self.stream, force_terminal=True)
            self._live = Live(
                get_renderable=self.renderable,
                console=console,
                refresh_per_second=2,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()

    def renderable(self) -> RenderableType:
        snap = self.snapshot()
        table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
        table.add_column("worker")
        table.add_column("instance")
        table.add_column("elapsed", justify="right")
        for r in snap.running[:MAX_RUNNING_SHOWN]:
            table.add_row(r.worker, r.key, fmt.duration(r.elapsed_s))
        extra = len(snap.running) - MAX_RUNNING_SHOWN
        parts: list[RenderableType] = [Text(format_line(snap))]
        if snap.running:
            parts.append(table)
        if extra > 0:
            parts.append(Text(f"... and {extra} more running"))
        for worker, what in sorted(self.activity().items()):
            parts.append(Text(f"{worker} {what}"))
        return Group(*parts)

    def render(self) -> None:
        """Show the current state now, ignoring the throttle."""
        if self._closed:
            return
        if self.is_tty:
            self._ensure_live()
            assert self._live is not None
            self._live.refresh()
        else:
            self._emit(self.clock())

    def close(self) -> None:
        """Stop the live view, or print the final line if the throttle held one back."""
        if self._closed:
            return
        if self._live is not None:
            self._live.refresh()
            self._live.stop()
        elif not self.is_tty and (self._pending or self._last_emit is None):
            self._emit(self.clock())
        self._closed = True


def format_line(snap: Snapshot) -> str:
    parts = [f"{PREFIX} {snap.done}/{snap.total} done"]
    if snap.counts:
        parts.append("(" + ", ".join(f"{s} {n}" for s, n in snap.counts) + ")")
    parts.append(f"running {len(snap.running)}")
    if snap.running:
        top = snap.running[0]
        parts.append(f"(longest {top.worker} {top.key} {fmt.duration(top.elapsed_s)})")
    if snap.spent_usd is not None:
        parts.append(f"spent {fmt.usd(snap.spent_usd)}")
    if snap.reserved_usd is not None:
        parts.append(f"reserved {fmt.usd(snap.reserved_usd)}")
    parts.append("ETA " + ("?" if snap.eta_s is None else fmt.duration(snap.eta_s)))
    return " ".join(parts)
