"""``harness programbench SUBCOMMAND``: ``export``, ``gate``, ``submission``, ``prepare`` and
``rescore`` (dispatch only)."""

from __future__ import annotations

from collections.abc import Sequence

from harness.api import dispatch

COMMANDS = {
    "export": (
        "benchmarks.programbench.export",
        "export_command",
        "copy a run's non-empty submissions into a fresh programbench-eval tree",
    ),
    "gate": (
        "benchmarks.programbench.gate",
        "gate_command",
        "paired comparison of a run with leaderboard per-task scores (PASS/FAIL)",
    ),
    "submission": (
        "benchmarks.programbench.leaderboard",
        "submission_command",
        "a run in the leaderboard's layout, then the official submit package and verify",
    ),
    "prepare": (
        "benchmarks.programbench.prepare",
        "prepare_command",
        "prepare-only: a running cleanroom container's task body and packaged workspace",
    ),
    "rescore": (
        "benchmarks.programbench.ignored_rescore",
        "rescore_command",
        "recompute every score from the kept eval.json with a registry ignored_tests.json",
    ),
}


def programbench_command(argv: Sequence[str]) -> int:
    return dispatch("harness programbench", COMMANDS, argv)
