"""The preflight's agent-side probe output (benchmarks/programbench/agent_probe.py)."""

from __future__ import annotations

from benchmarks.programbench.agent_probe import parse_view

STATUS = (
    b"status Name:\tcat\nstatus CapPrm:\t0000000000000000\nstatus CapEff:\t0000000000000000\n"
    b"status CapBnd:\t00000000000001fb\nstatus NoNewPrivs:\t0\nstatus Uid:\t1000\n"
)


def test_first_zero_probe_mode_and_capabilities() -> None:
    out = STATUS + b"mode 1999 4111\nprobe --version 2\nprobe --help 0\n"
    view = parse_view(out, b"", "./reference_executable")
    assert view.probe == "./reference_executable --help"
    assert view.mode == "1999 4111" and view.launcher_error is None
    assert view.capabilities == {
        "CapPrm": "0000000000000000",
        "CapEff": "0000000000000000",
        "CapBnd": "00000000000001fb",
        "NoNewPrivs": "0",
    }


def test_no_probe_answers_zero_and_launcher_failure() -> None:
    view = parse_view(STATUS + b"mode 1999 4111\nprobe --version 1\nprobe --help 10\n", b"", "./r")
    assert view.probe is None  # "launched"
    view = parse_view(
        STATUS + b"mode 1999 4111\nlauncher_failed --version\n",
        b"protected-exec: cannot open the program\n",
        "./r",
    )
    assert view.launcher_error == "protected-exec: cannot open the program"
