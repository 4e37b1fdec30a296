"""Read a process tree's memory and CPU from /proc (Linux), for the perf benchmarks.

A sample is one pass over ``/proc``: the descendants of a root pid (the root included) with
their resident memory and CPU ticks, and, apart, every process whose command name is in a
set (the engine's daemons and shims, which are not the harness's children).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")
ENGINE_NAMES = frozenset({"dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2"})


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    name: str
    rss: int  # bytes
    cpu_s: float  # user + system, this process only


@dataclass(frozen=True)
class Sample:
    tree: tuple[Proc, ...]
    engine: tuple[Proc, ...]

    @property
    def tree_rss(self) -> int:
        return sum(p.rss for p in self.tree)

    @property
    def tree_cpu_s(self) -> float:
        return sum(p.cpu_s for p in self.tree)

    @property
    def engine_rss(self) -> int:
        return sum(p.rss for p in self.engine)

    @property
    def engine_cpu_s(self) -> float:
        return sum(p.cpu_s for p in self.engine)

    def count(self, name: str) -> int:
        return sum(1 for p in self.engine if p.name == name)


def _read(pid: int) -> Proc | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            stat = fh.read()
        with open(f"/proc/{pid}/statm", encoding="ascii") as fh:
            resident = int(fh.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None  # gone between the listing and the read
    name = stat[stat.index("(") + 1:stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2:].split()
    # fields[0] is the state (stat's field 3): ppid is field 4, utime 14, stime 15
    return Proc(pid=pid, ppid=int(fields[1]), name=name, rss=resident * PAGE,
                cpu_s=(int(fields[11]) + int(fields[12])) / TICKS)


def _all() -> Iterable[Proc]:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            proc = _read(int(entry))
            if proc is not None:
                yield proc


def sample(root: int, engine_names: frozenset[str] = ENGINE_NAMES) -> Sample:
    procs = list(_all())
    children: dict[int, list[Proc]] = {}
    for proc in procs:
        children.setdefault(proc.ppid, []).append(proc)
    tree = [p for p in procs if p.pid == root]
    frontier = [root]
    while frontier:
        kids = children.get(frontier.pop(), [])
        tree.extend(kids)
        frontier.extend(k.pid for k in kids)
    engine = tuple(p for p in procs if p.name in engine_names)
    return Sample(tree=tuple(tree), engine=engine)
