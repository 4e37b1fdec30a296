"""Graceful stop: the first SIGINT/SIGTERM stops the run, a second one exits at once.

Every process of a run (the single process, the xdist controller, each worker) installs a
:class:`StopGuard` while items run. The stop file ``<run_root>/.harness/stop`` is the one
shared record of a stop request: workers check it before each item starts, so a stop asked
by any process (a signal, the budget meter, a refused reservation) keeps every worker from
starting new instances. A running instance is interrupted by :class:`RunInterrupted` raised
from the handler, but only while it is in setup or call: teardown is never interrupted, so
sandboxes are always removed.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from harness.core.errors import RunInterrupted
from harness.core.fsutil import create_exclusive
from harness.core.layout import stop_file

FORWARD_SIGNAL = signal.SIGUSR1


def request_stop(run_root: Path, cause: str) -> str:
    """Record a stop request; the first cause recorded wins. Returns the effective cause."""
    if create_exclusive(stop_file(run_root), cause.encode()):
        return cause
    return read_stop(run_root) or cause


def read_stop(run_root: Path) -> str | None:
    try:
        text = stop_file(run_root).read_text().strip()
    except OSError:
        return None
    return text or "stop_requested"


class StopGuard:
    """Signal handling for one process of a run."""

    def __init__(
        self,
        run_root: Path,
        *,
        forward_to: Callable[[], list[int]] | None = None,
        on_second: Callable[[str], None] | None = None,
    ) -> None:
        self.run_root = Path(run_root)
        self.forward_to = forward_to
        self.on_second = on_second
        self.cause: str | None = None
        self.phase = "idle"  # idle | setup | call | teardown
        self._previous: dict[int, object] = {}

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, FORWARD_SIGNAL):
            self._previous[sig] = signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        forwarded = signum == FORWARD_SIGNAL
        if self.cause is not None:
            if forwarded:
                return  # the controller relays a stop we already know about
            if self.on_second is not None:
                self.on_second(self.cause)
            os._exit(3)
        cause = read_stop(self.run_root) if forwarded else None
        cause = request_stop(self.run_root, cause or f"signal_{signum}")
        self.cause = cause
        if self.forward_to is not None:
            for pid in self.forward_to():
                with contextlib.suppress(OSError):
                    os.kill(pid, FORWARD_SIGNAL)
        if self.phase in ("setup", "call"):
            raise RunInterrupted(cause)
