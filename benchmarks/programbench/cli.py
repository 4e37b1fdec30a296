"""``harness programbench SUBCOMMAND``: ``export`` and ``gate`` (dispatch only)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

SUBCOMMANDS = {
    "export": "copy a run's non-empty submissions into a fresh programbench-eval tree",
    "gate": "paired comparison of a run with leaderboard per-task scores (PASS/FAIL)",
}


def programbench_command(argv: Sequence[str]) -> int:
    args = list(argv)
    if not args or args[0] in ("-h", "--help"):
        print("usage: harness programbench {export,gate} ...\n")
        for name, text in SUBCOMMANDS.items():
            print(f"  {name:<8}{text}")
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name == "export":
        from benchmarks.programbench.export import export_command

        return export_command(rest)
    if name == "gate":
        from benchmarks.programbench.gate import gate_command

        return gate_command(rest)
    print(f"harness programbench: unknown subcommand {name!r} (export, gate)", file=sys.stderr)
    return 2
