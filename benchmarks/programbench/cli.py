"""``harness programbench SUBCOMMAND``: ``export`` and ``gate`` (dispatch only)."""

from __future__ import annotations

from collections.abc import Sequence

from harness.cli import dispatch

COMMANDS = {
    "export": ("benchmarks.programbench.export", "export_command",
               "copy a run's non-empty submissions into a fresh programbench-eval tree"),
    "gate": ("benchmarks.programbench.gate", "gate_command",
             "paired comparison of a run with leaderboard per-task scores (PASS/FAIL)"),
}


def programbench_command(argv: Sequence[str]) -> int:
    return dispatch("harness programbench", COMMANDS, argv)
