"""Graceful stop (harness.core.signals), in this process with real signals: the first signal
records the stop and interrupts only a running instance, the stop file is the one record
every process reads, a second signal exits at once (exit 3).

(Named test_stop_signals: tests/runner/test_signals.py runs whole sessions and signals them.)
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.core import signals
from harness.core.errors import RunInterrupted
from harness.core.layout import stop_file
from harness.core.signals import FORWARD_SIGNAL, StopGuard, read_stop, request_stop

pytestmark = pytest.mark.usefixtures("no_git")


class Exited(BaseException):
    """What ``os._exit(code)`` does here instead of ending the test process."""


@pytest.fixture
def guard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StopGuard]:
    def fake_exit(code: int) -> None:
        raise Exited(code)

    monkeypatch.setattr(signals.os, "_exit", fake_exit)
    g = StopGuard(tmp_path)
    g.install()
    try:
        yield g
    finally:
        g.uninstall()


def test_the_first_stop_request_wins(tmp_path: Path) -> None:
    assert read_stop(tmp_path) is None
    assert request_stop(tmp_path, "budget_exhausted") == "budget_exhausted"
    assert request_stop(tmp_path, "signal_15") == "budget_exhausted"
    assert read_stop(tmp_path) == "budget_exhausted"
    stop_file(tmp_path).write_text("\n")
    assert read_stop(tmp_path) == "stop_requested"  # a stop file says stop, even empty


def test_a_signal_between_instances_records_the_stop_and_interrupts_nothing(
        guard: StopGuard, tmp_path: Path) -> None:
    os.kill(os.getpid(), signal.SIGTERM)  # idle: no exception reaches here
    assert guard.cause == "signal_15" and read_stop(tmp_path) == "signal_15"


@pytest.mark.parametrize("phase", ["setup", "call"])
def test_a_signal_interrupts_a_running_instance(guard: StopGuard, tmp_path: Path,
                                                phase: str) -> None:
    guard.phase = phase
    with pytest.raises(RunInterrupted, match="signal_2"):
        os.kill(os.getpid(), signal.SIGINT)
    assert read_stop(tmp_path) == "signal_2"


def test_teardown_is_never_interrupted(guard: StopGuard, tmp_path: Path) -> None:
    """Teardown removes the sandboxes: a stop during it lets it finish."""
    guard.phase = "teardown"
    os.kill(os.getpid(), signal.SIGTERM)
    assert guard.cause == "signal_15" and read_stop(tmp_path) == "signal_15"


def test_a_second_signal_exits_at_once_with_3(guard: StopGuard, tmp_path: Path) -> None:
    seen: list[str] = []
    guard.on_second = seen.append  # the controller records what it can first
    os.kill(os.getpid(), signal.SIGTERM)
    with pytest.raises(Exited) as info:
        os.kill(os.getpid(), signal.SIGINT)
    assert info.value.args == (3,) and seen == ["signal_15"]
    assert read_stop(tmp_path) == "signal_15"  # the first cause stays the run's


def test_a_relayed_stop_takes_the_recorded_cause_and_is_not_a_second_signal(
        guard: StopGuard, tmp_path: Path) -> None:
    """The controller relays a stop (the budget ran out) to its workers with SIGUSR1: the
    worker takes the stop file's cause; a relay of a stop it knows does not end it."""
    request_stop(tmp_path, "budget_exhausted")
    guard.phase = "call"
    with pytest.raises(RunInterrupted, match="budget_exhausted"):
        os.kill(os.getpid(), FORWARD_SIGNAL)
    assert guard.cause == "budget_exhausted"
    os.kill(os.getpid(), FORWARD_SIGNAL)  # again: ignored (no exit, no interruption)
    with pytest.raises(Exited):
        os.kill(os.getpid(), signal.SIGTERM)  # a real second signal still exits


def test_the_controller_relays_the_first_signal_to_its_workers(
        guard: StopGuard, monkeypatch: pytest.MonkeyPatch) -> None:
    gone, alive = 2**22 + 12345, 4242
    sent: list[tuple[int, int]] = []

    def kill(pid: int, sig: int) -> None:
        sent.append((pid, sig))
        if pid == gone:
            raise ProcessLookupError(pid)  # a worker that already ended does not matter

    guard.forward_to = lambda: [gone, alive]
    monkeypatch.setattr(signals.os, "kill", kill)
    signal.raise_signal(signal.SIGTERM)
    assert sent == [(gone, FORWARD_SIGNAL), (alive, FORWARD_SIGNAL)]


def test_uninstall_gives_the_handlers_back(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGTERM)
    g = StopGuard(tmp_path)
    g.install()
    assert signal.getsignal(signal.SIGTERM) == g._handle
    g.uninstall()
    assert signal.getsignal(signal.SIGTERM) == before
