"""Pacing of the model calls at the gateway, shared by every instance of the run (issue 45:
a rate-limited provider must cost latency, not the model's score).

* A concurrency cap and a requests-per-minute limit (``--model-concurrency``,
  ``--model-rpm``) hold across every gateway of the run, in every worker process: a slot is
  an exclusive lock on one of N files, a request's turn is a timestamp in a shared window,
  both in the run's state folder (:func:`pacing_dir`).
* A 429 is waited out (its ``Retry-After``, seconds or an HTTP date, else an exponential
  backoff with jitter) and the call sent again; a 5xx or a failed connection is retried
  too, at most ``retries`` times per call and ``retry_budget`` times per run. Every wait
  of a call counts against its ceiling (``--model-wait-max-s``); past it the agent gets the
  provider's answer (or 429 ``model_rate_limited`` when no call could go out).
* A stream silent for ``stream_idle_s`` (``--model-stream-idle-s``) is cut.

Only an answer that arrives is metered, so a retried call is billed once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path

from pydantic import BaseModel, Field

WINDOW_S = 60.0
POLL_S = 0.02
PACING_DIR = "model_pacing"
STATE_NAME = "state.json"


class PacingState(BaseModel):
    """``<state>/model_pacing/state.json``: the requests of the last minute (epoch s) and
    the retries the run has used."""

    requests: list[float] = Field(default_factory=list)
    retries_used: int = Field(default=0, ge=0)


@dataclass(frozen=True)
class PacingPolicy:
    """The run's pacing options (``None``: no cap of that kind)."""

    concurrency: int | None = None
    rpm: float | None = None
    wait_max_s: float = 600.0
    retries: int = 3  # per call: a 5xx or a failed connection
    retry_budget: int = 200  # per run, over every call of every instance
    stream_idle_s: float = 120.0
    backoff_s: float = 1.0
    backoff_cap_s: float = 60.0
    window_s: float = WINDOW_S  # the rpm window (shorter only in tests)
    retry_after_floor_s: float = 1.0  # a Retry-After of 0 (or less, or nan) waits this

    def record(self) -> dict[str, float | int | None]:
        return {"concurrency": self.concurrency, "rpm": self.rpm,
                "wait_max_s": self.wait_max_s, "retries": self.retries,
                "retry_budget": self.retry_budget, "stream_idle_s": self.stream_idle_s}


class PacingTimeout(Exception):
    """No slot or turn came before the call's wait ceiling."""


def pacing_dir(state_dir: Path) -> Path:
    return Path(state_dir) / PACING_DIR


def retry_after_s(value: str | None) -> float | None:
    """A ``Retry-After`` header's seconds (a number, or an HTTP date from now)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


class Pacer:
    """The run's limiter (``directory`` None: this process only, for a gateway without a
    run, such as a test's)."""

    def __init__(self, policy: PacingPolicy, directory: Path | None = None) -> None:
        self.policy = policy
        self.directory = directory
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
        self._local = threading.Lock()
        self._local_slots = threading.BoundedSemaphore(policy.concurrency or 1)
        self._local_window: list[float] = []
        self._local_retries = 0

    # concurrency ------------------------------------------------------------------------
    @contextlib.contextmanager
    def slot(self, deadline: float) -> Iterator[float]:
        """Hold one of the run's ``concurrency`` slots for a call; yields the seconds
        waited for it. :class:`PacingTimeout` past ``deadline`` (monotonic)."""
        if not self.policy.concurrency:
            yield 0.0
            return
        started = time.monotonic()
        if self.directory is None:
            if not self._local_slots.acquire(timeout=max(0.0, deadline - started)):
                raise PacingTimeout("no free model-call slot before the wait ceiling")
            try:
                yield time.monotonic() - started
            finally:
                self._local_slots.release()
            return
        fd = self._take_slot_file(deadline)
        try:
            yield time.monotonic() - started
        finally:
            os.close(fd)  # the lock goes with the descriptor

    def _take_slot_file(self, deadline: float) -> int:
        assert self.directory is not None and self.policy.concurrency
        while True:
            for i in range(self.policy.concurrency):
                fd = os.open(self.directory / f"slot-{i}", os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return fd
                except BlockingIOError:
                    os.close(fd)
            if time.monotonic() + POLL_S > deadline:
                raise PacingTimeout("no free model-call slot before the wait ceiling")
            time.sleep(POLL_S)

    # requests per minute -----------------------------------------------------------------
    def turn(self, deadline: float) -> float:
        """Wait for this request's turn under ``rpm``; returns the seconds waited."""
        if not self.policy.rpm:
            return 0.0
        started = time.monotonic()
        while True:
            wait = self._claim()
            if wait <= 0:
                return time.monotonic() - started
            if time.monotonic() + wait > deadline:
                raise PacingTimeout("the requests-per-minute limit leaves no turn before "
                                    "the wait ceiling")
            time.sleep(min(wait, 1.0))

    def _claim(self) -> float:
        """Take a turn now (0) or say how long until one frees (seconds)."""
        assert self.policy.rpm
        now = time.time()
        with self._window() as window:
            span = self.policy.window_s
            recent = [t for t in window if now - span < t <= now + 1.0]  # none from the future
            if len(recent) < self.policy.rpm:
                recent.append(now)
                window[:] = recent
                return 0.0
            window[:] = recent
            return recent[0] + span - now + 0.001

    @contextlib.contextmanager
    def _window(self) -> Iterator[list[float]]:
        if self.directory is None:
            with self._local:
                yield self._local_window
            return
        with self._locked() as state:
            yield state.requests

    # retries ----------------------------------------------------------------------------
    def take_retry(self) -> bool:
        """One retry from the run's budget; False when it is spent."""
        if self.directory is None:
            with self._local:
                if self._local_retries >= self.policy.retry_budget:
                    return False
                self._local_retries += 1
                return True
        with self._locked() as state:
            if state.retries_used >= self.policy.retry_budget:
                return False
            state.retries_used += 1
            return True

    def backoff(self, attempt: int, retry_after: str | None) -> float:
        """Seconds before sending again: the provider's ``Retry-After``, else exponential
        with full jitter (at most ``backoff_cap_s``)."""
        told = retry_after_s(retry_after)
        if told is not None:  # never a loop of instant retries, whatever the header says
            return min(max(told, self.policy.retry_after_floor_s), self.policy.wait_max_s)
        cap = min(self.policy.backoff_cap_s, self.policy.backoff_s * 2 ** attempt)
        return random.uniform(cap / 2, cap)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[PacingState]:
        """The run's pacing state file, read and written under its lock."""
        assert self.directory is not None
        fd = os.open(self.directory / STATE_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.read(fd, 1 << 20)
            try:
                state = PacingState.model_validate_json(raw) if raw else PacingState()
            except ValueError:
                state = PacingState()  # torn by a kill mid-write: start the window again
            yield state
            os.lseek(fd, 0, os.SEEK_SET)
            os.ftruncate(fd, 0)
            os.write(fd, state.model_dump_json().encode())
        finally:
            os.close(fd)


_run_pacer: Pacer | None = None
_default_pacer: Pacer | None = None
_pacer_lock = threading.Lock()


def configure_run_pacer(policy: PacingPolicy, directory: Path | None) -> Pacer:
    """The pacer every gateway of this process uses from now on (the run's options and its
    shared state folder); the runner sets it at admission and in each worker."""
    global _run_pacer
    with _pacer_lock:
        _run_pacer = Pacer(policy, directory)
        return _run_pacer


def current_pacer() -> Pacer:
    """The run's pacer, else one with the default policy for this process (retries and the
    stream idle cut, no caps)."""
    global _default_pacer
    with _pacer_lock:
        if _run_pacer is not None:
            return _run_pacer
        if _default_pacer is None:
            _default_pacer = Pacer(PacingPolicy())
        return _default_pacer
