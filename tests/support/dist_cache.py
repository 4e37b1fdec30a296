"""The installed distributions, read once by a process that forks many pytest runs.

A test helper for :mod:`.forkrun`. Every pytest session lists every installed distribution
twice (pluggy's entry-point plugins, then pytest's assertion-rewrite marks for them), reading
each one's ``entry_points.txt`` again: about 2,500 small files a run here, a fifth of a
short run's CPU. :func:`read_once` makes :func:`importlib.metadata.distributions` answer
from what the server read before it forked, one list per ``sys.path`` entry, so a child
still sees exactly the distributions of its own ``sys.path``, in order: an entry the server
did not read (a run's working directory, its ``PYTHONPATH``) is read live each time.
"""

from __future__ import annotations

import importlib.metadata as md
import sys
from collections.abc import Iterable
from typing import Any


class ReadDist:
    """A distribution with its entry points (and, for pytest plugins, its files) read;
    everything else is the distribution's own."""

    def __init__(self, dist: md.Distribution) -> None:
        self._dist = dist
        self.entry_points = dist.entry_points
        plugin = any(ep.group == "pytest11" for ep in self.entry_points)
        self.files = dist.files if plugin else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dist, name)


def read_once() -> None:
    """Replace :func:`importlib.metadata.distributions` (no arguments) with the lists read
    now for each ``sys.path`` entry; calls with arguments go to the original."""
    original = md.distributions
    read: dict[str, list[ReadDist]] = {}
    for entry in sys.path:
        if entry and entry not in read:
            read[entry] = [ReadDist(d) for d in original(path=[entry])]

    def listed(entry: str) -> Iterable[Any]:
        found = read.get(entry)
        return found if found is not None else original(path=[entry])

    def distributions(**kwargs: Any) -> Iterable[Any]:
        if kwargs:
            return original(**kwargs)
        return iter([d for entry in sys.path for d in listed(entry)])

    md.distributions = distributions  # type: ignore[assignment]
