"""Command lines given again (a resume's command, replay-check's session)."""

from __future__ import annotations

from collections.abc import Collection, Iterable


def without_options(args: Iterable[str], names: Collection[str]) -> tuple[list[str], set[str]]:
    """``args`` without the options ``names`` and their values (``--opt VALUE`` or
    ``--opt=VALUE``), and the names that were there."""
    kept: list[str] = []
    found: set[str] = set()
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in names:
            found.add(name)
            skip = "=" not in arg
            continue
        kept.append(arg)
    return kept, found
