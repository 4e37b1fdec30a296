"""A command line of subcommands: ``harness``'s own, and each benchmark's CLI
(``harness programbench ...``, ``harness cowork ...``) through :func:`dispatch`."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence


def dispatch(prog: str, commands: dict[str, tuple[str, str, str]], argv: Sequence[str],
             footer: str = "") -> int:
    """Run ``commands[argv[0]]`` (module, function, help) with the rest of ``argv``."""
    argv = list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: {prog} COMMAND [ARGS]\n\ncommands:")
        for name, (_, _, text) in commands.items():
            print(f"  {name:<14}{text}")
        if footer:
            print(f"\n{footer}")
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in commands:
        print(f"{prog}: unknown command {name!r}; run '{prog} --help' for the list",
              file=sys.stderr)
        return 2
    module_name, func_name, _ = commands[name]
    try:
        func = getattr(importlib.import_module(module_name), func_name)
    except (ImportError, AttributeError) as exc:
        print(f"{prog} {name}: not available in this installation ({exc})", file=sys.stderr)
        return 2
    try:
        return int(func(rest))
    except SystemExit as exc:  # argparse
        return int(exc.code) if isinstance(exc.code, int) else 2
