"""Longest first: the estimates, the order and the dealing (pure logic, no pytest, no xdist).

With hour-long, uneven instances the tail decides the wall time, so the runner starts the
longest instances first. An instance's estimate is its last measured ``duration_s`` in
earlier runs' ledgers, or else its ``difficulty`` marker (hard > medium > easy). The order is
a stable sort, longest first, with unknown estimates first (they may be long).

Dealing (what the xdist scheduler of :mod:`harness.runner.order` does with the sorted
items): one item at a time, round robin, each worker holding at most :data:`HOLD` items (the
one it runs and the next), topped up as it finishes one. xdist's own ``load`` scheduling
hands out consecutive chunks, which would give the two longest items to one worker.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from harness.core.layout import LEDGER_NAME

DIFFICULTY = {"easy": 1.0, "medium": 2.0, "hard": 3.0}
HOLD = 2  # an xdist worker runs an item only once it knows the next one
UNMEASURED = ("skipped", "carried")  # rows whose duration is not the instance's

Node = TypeVar("Node")


class DurationsError(ValueError):
    """A ``--durations-from`` root that has no ledger; the message names it."""


def ledger_durations(roots: Iterable[str | Path]) -> dict[str, float]:
    """instance id -> its last measured duration in the given runs' ledgers (later roots
    win); an attempt's (``<task>@<k>``, ``--attempts``) is also its task's. A torn or
    garbled line is skipped, as are skipped and carried rows and rows without a positive
    duration."""
    out: dict[str, float] = {}
    for root in roots:
        path = Path(root) / LEDGER_NAME
        if not path.is_file():
            raise DurationsError(f"--durations-from {root}: no {LEDGER_NAME} there")
        for line in path.read_text(encoding="utf-8").split("\n"):  # rows may hold U+2028
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line
            if not isinstance(row, dict):
                continue
            dur, iid = row.get("duration_s"), row.get("instance_id")
            if isinstance(iid, str) and isinstance(dur, (int, float)) and dur > 0 and \
                    row.get("outcome") not in UNMEASURED:
                out[iid] = float(dur)
                task = row.get("sample_of")
                if isinstance(task, str):
                    out[task] = float(dur)
    return out


def estimate(instance_id: str, markers: Mapping[str, Any],
             durations: Mapping[str, float]) -> float | None:
    """An instance's estimated duration: its measured one, else (only when no duration is
    known at all, so measured and guessed figures are never compared) its difficulty."""
    if instance_id in durations:
        return durations[instance_id]
    level = markers.get("difficulty") if not durations else None
    return DIFFICULTY.get(level) if isinstance(level, str) else None


def longest_first(estimates: Sequence[float | None]) -> list[int] | None:
    """The positions of ``estimates`` longest first (stable: equal estimates keep their
    order; unknown ones go first); None when nothing is known (keep the given order)."""
    if all(e is None for e in estimates):
        return None

    def key(index: int) -> float:
        value = estimates[index]
        return -(float("inf") if value is None else value)

    return sorted(range(len(estimates)), key=key)


def first_deal(nodes: Sequence[Node], hold: int = HOLD) -> list[Node]:
    """Who gets each of the first items, one item each: round robin over ``nodes``,
    ``hold`` rounds (fewer items than that: the first ones in this order get them)."""
    return [node for _ in range(hold) for node in nodes]


def top_up(held: int, hold: int = HOLD) -> int:
    """How many items a node holding ``held`` gets next (0: it has enough)."""
    return max(hold - held, 0)
