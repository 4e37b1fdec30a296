"""Phase deadlines of an instance (issue 45: infrastructure that hangs instead of failing).

The task timeout bounds the agent; a pull from a registry that never answers, a create that
never returns, a sidecar that never comes up, a collect or an eval that hangs would hold a
worker slot for hours. Each phase has a deadline (:data:`DEFAULTS`, fit for a 6 h task; set
with ``--phase-timeout PHASE=SECONDS``, recorded in the manifest's
``extra.phase_deadlines``). A phase past its deadline ends the instance as infrastructure,
``phase_timeout`` naming the phase: the phase's blocking call is interrupted (a real-time
timer's signal in the thread that runs the instance), then the instance's teardown removes
its containers and releases its worker slot and budget hold as for any failure.

A phase run outside the main thread (no signal can reach it) runs without its deadline.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType

import pytest

from harness.core.errors import InfraError, RefusalError

PHASES = ("pull", "create", "provision", "agent", "collect", "eval", "teardown")
# seconds; None: no deadline of its own (the agent's is the task timeout)
DEFAULTS: dict[str, float | None] = {"pull": 3600.0, "create": 600.0, "provision": 1800.0,
                                     "agent": None, "collect": 1800.0, "eval": 7200.0,
                                     "teardown": 900.0}
REASON = "phase_timeout"
DEADLINES_KEY: pytest.StashKey[dict[str, float | None]] = pytest.StashKey()


class PhaseTimeout(InfraError):
    """A phase past its deadline: infrastructure, named."""

    reason_code = REASON

    def __init__(self, phase: str, seconds: float) -> None:
        super().__init__(f"{REASON}: {phase} (past its deadline of {seconds:g} s; set "
                         f"--phase-timeout {phase}=SECONDS)")
        self.phase = phase


def parse_deadlines(given: list[str] | None) -> dict[str, float | None]:
    """The defaults with ``PHASE=SECONDS`` overrides (``0``: none); ValueError names the
    bad entry and the fix."""
    out = dict(DEFAULTS)
    for entry in given or []:
        name, sep, value = entry.partition("=")
        if not sep or name not in PHASES:
            raise ValueError(f"--phase-timeout {entry!r}: use PHASE=SECONDS with PHASE one of "
                             f"{', '.join(PHASES)}")
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if seconds < 0:
            raise ValueError(f"--phase-timeout {entry!r}: SECONDS must be a number >= 0 "
                             f"(0: no deadline), e.g. --phase-timeout {name}=600")
        out[name] = seconds or None
    return out


@contextlib.contextmanager
def phase_deadline(phase: str, seconds: float | None) -> Iterator[None]:
    """Run the body under ``seconds`` (None: no deadline); past it, :class:`PhaseTimeout`
    is raised where the body is blocked. Nested phases: the inner one's timer runs, the
    outer one's is restored after it (its time still counting)."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return
    running, _ = signal.getitimer(signal.ITIMER_REAL)
    if running and running <= seconds:  # an outer timer (a phase, pytest-timeout) ends first
        yield
        return

    fired: list[bool] = []

    def expired(signum: int, frame: FrameType | None) -> None:
        fired.append(True)
        raise PhaseTimeout(phase, seconds)

    previous = signal.signal(signal.SIGALRM, expired)
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    started = time.monotonic()
    try:
        yield
    except PhaseTimeout:
        raise
    except Exception as exc:
        if fired:  # the phase's own code caught the timeout and raised its own error
            raise PhaseTimeout(phase, seconds) from exc
        raise
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:  # an outer phase's timer: what is left of it
            left = outer - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 0.001))


def deadlines(config: pytest.Config) -> dict[str, float | None]:
    """The run's phase deadlines, parsed once (a bad ``--phase-timeout`` is a refusal)."""
    found = config.stash.get(DEADLINES_KEY, None)
    if found is None:
        try:
            found = parse_deadlines(config.getoption("phase_timeout", None))
        except ValueError as exc:
            raise RefusalError(str(exc), stage="options", reason="bad_option") from exc
        config.stash[DEADLINES_KEY] = found
    return found


def phase(config: pytest.Config, name: str) -> contextlib.AbstractContextManager[None]:
    """The run's deadline for phase ``name`` around a ``with`` body."""
    return phase_deadline(name, deadlines(config).get(name))
