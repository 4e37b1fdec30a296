"""Issue 45, infrastructure that hangs: each phase of an instance has a deadline; past it
the phase's blocking call is interrupted and the instance is infrastructure, the phase
named. The mechanism here (no Docker); a pull that hangs on a registry that accepts and
never answers, on the real engine: tests/sandbox/images/test_image_pull_hang.py."""

from __future__ import annotations

import signal
import socket
import threading
import time

import pytest

from harness.runner.deadlines import (
    DEFAULTS,
    PhaseTimeout,
    parse_deadlines,
    phase_deadline,
)

HELD: list[socket.socket] = []  # the accepted connections, kept open (never answered)


def silent_server() -> tuple[socket.socket, int]:
    """A listener that accepts and never answers (a wedged registry or sidecar)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    threading.Thread(target=lambda: HELD.append(server.accept()[0]), daemon=True).start()
    return server, server.getsockname()[1]


def armed() -> float:
    """What is left of the real-time timer (pytest-timeout's own, in this suite)."""
    return signal.getitimer(signal.ITIMER_REAL)[0]


def test_a_blocked_read_past_the_deadline_is_a_named_infrastructure_failure() -> None:
    server, port = silent_server()
    before, started = armed(), time.monotonic()
    with (socket.create_connection(("127.0.0.1", port)) as conn,
          pytest.raises(PhaseTimeout) as caught, phase_deadline("provision", 0.5)):
        conn.recv(1)  # blocks: nothing ever comes
    assert 0.4 < time.monotonic() - started < 5
    assert caught.value.reason_code == "phase_timeout" and caught.value.phase == "provision"
    assert str(caught.value).startswith("phase_timeout: provision (past its deadline of 0.5 s")
    assert abs(armed() - max(before - (time.monotonic() - started), 0)) < 0.5 or not before
    server.close()


def test_a_phase_within_its_deadline_leaves_no_timer_and_an_outer_one_goes_on() -> None:
    before = armed()  # an outer timer (pytest-timeout's) is given back what is left of it
    with phase_deadline("collect", 5):
        time.sleep(0.05)
    assert (before == 0 and armed() == 0) or abs(armed() - (before - 0.05)) < 0.5
    with (pytest.raises(PhaseTimeout) as caught, phase_deadline("eval", 0.6),
          phase_deadline("pull", 30)):  # the outer ends first: the inner adds nothing
        time.sleep(3)
    assert caught.value.phase == "eval"
    with pytest.raises(PhaseTimeout) as caught, phase_deadline("eval", 0.8):
        with phase_deadline("pull", 0.2):
            try:
                time.sleep(3)
            except PhaseTimeout as inner:
                assert inner.phase == "pull"
        time.sleep(3)  # the outer's time still counts after the inner
    assert caught.value.phase == "eval"


def test_no_deadline_and_other_threads_run_unbounded() -> None:
    with phase_deadline("agent", None):
        time.sleep(0.01)
    seen: list[BaseException] = []

    def work() -> None:
        try:
            with phase_deadline("pull", 0.05):
                time.sleep(0.2)
        except BaseException as exc:  # pragma: no cover - the failure this test catches
            seen.append(exc)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen == []


def test_the_option_names_the_phase_and_the_fix() -> None:
    assert parse_deadlines(None) == DEFAULTS
    assert DEFAULTS["agent"] is None and all(v for k, v in DEFAULTS.items() if k != "agent")
    got = parse_deadlines(["pull=60", "eval=0"])
    assert got["pull"] == 60 and got["eval"] is None and got["create"] == DEFAULTS["create"]
    for bad in ("pul=60", "pull", "pull=-1", "pull=soon"):
        with pytest.raises(ValueError, match="--phase-timeout"):
            parse_deadlines([bad])


def test_a_phase_that_wraps_the_timeout_in_its_own_error_still_names_the_phase() -> None:
    """A sidecar's start that turns every failure into its own error (pg_fail) does not
    hide the deadline: the phase's timeout is what the instance records."""
    with pytest.raises(PhaseTimeout) as caught, phase_deadline("provision", 0.2):
        try:
            time.sleep(3)
        except Exception as exc:
            raise RuntimeError("postgres sidecar failed") from exc
    assert caught.value.phase == "provision"
    assert isinstance(caught.value.__cause__, RuntimeError)
