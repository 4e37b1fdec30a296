"""``harness cowork ...``: Cowork Bench tools (``audit``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

COMMANDS = {"audit": "audit a finished run: classifications, eval attempts, manual-review flags"}


def cowork_command(argv: Sequence[str]) -> int:
    args = list(argv)
    if not args or args[0] in ("-h", "--help"):
        print("usage: harness cowork COMMAND [ARGS]\n\ncommands:")
        for name, text in COMMANDS.items():
            print(f"  {name:<8}{text}")
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name == "audit":
        from benchmarks.cowork_bench.audit import audit_command

        return audit_command(rest)
    print(
        f"harness cowork: unknown command {name!r}; use one of {', '.join(COMMANDS)}",
        file=sys.stderr,
    )
    return 2
