"""Place each instance on an engine with free capacity, across all xdist workers of a run.

Capacity is enforced with **file-lock slots**: engine ``i`` of capacity ``c`` has ``c``
files ``<run_root>/.harness/engines/slot-<i>-<k>.lock``; an instance holds an exclusive
``flock`` on one of them from setup to teardown. Why slots rather than binding workers to
engines: xdist hands items to whichever worker is free (``worksteal``), so a worker bound
to a busy or lost engine would sit idle while another engine has room; with slots any
worker uses any engine, capacities need not divide the worker count, and the kernel drops
a crashed worker's ``flock`` by itself (the budget's custody needs pid checks; a slot does
not, it is never persisted). Among engines with a free slot the least loaded (used /
capacity) wins, so a run spreads over its engines.

An engine that stops answering is marked lost (``lost-<i>`` beside the slots): no instance
is placed there any more; the instance that noticed it ends ``infra_failed`` ``engine_lost``
(:mod:`harness.runner.engine_plugin`), and a resume re-probes the engines at admission.

An engine admitted with capacity 0 (too small for one instance of the run's size) gets
nothing. Before a slot is taken, ``pressure(engine)`` (the engine plugin passes
:func:`harness.sandbox.engine_capacity.engine_pressure`) may name a memory pressure: the
engine is passed over until it recovers.

While an instance holds a slot (:func:`placed`), the slot is this process's *active* slot;
``os.environ`` is never changed. What must reach the instance's engine is handed it
explicitly: :func:`harness.sandbox.client.get_client` (without an ``environment``) makes its
client from :func:`instance_environment`, and a subprocess that runs ``docker`` or the
official ``programbench`` gets ``env=instance_environment(...)`` (this process's environment
with the engine's ``DOCKER_HOST``, and for a TLS engine with certificates of its own
``DOCKER_TLS_VERIFY``/``DOCKER_CERT_PATH``; for an ssh engine the run's tunnel socket).
:func:`controller_environment` is the environment the run started with (the controller's
engine: builds and transfers start there).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.core.layout import state_dir
from harness.sandbox.active_engine import current, instance_environment, swap
from harness.sandbox.engines import EngineRecord, alive, engine_environment

POLL_S = 0.2


class NoEngineLeft(RuntimeError):
    """Every engine of the run is lost."""


@dataclass
class Slot:
    engine: EngineRecord
    run_root: Path
    fd: int

    def environment(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) with the variables that reach this
        slot's engine on top (none for the local engine)."""
        return {**(os.environ if base is None else base), **engine_environment(self.engine)}

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing drops the flock
            self.fd = -1


def engines_dir(run_root: Path | str) -> Path:
    return state_dir(run_root) / "engines"


def lost_marker(run_root: Path | str, index: int) -> Path:
    return engines_dir(run_root) / f"lost-{index}"


def mark_lost(run_root: Path | str, index: int, why: str) -> None:
    path = lost_marker(run_root, index)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(why[:500] + "\n")


def is_lost(run_root: Path | str, index: int) -> bool:
    return lost_marker(run_root, index).exists()


def _try_lock(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _used(paths: list[Path]) -> int:
    used = 0
    for path in paths:
        fd = _try_lock(path)
        if fd is None:
            used += 1
        else:
            os.close(fd)
    return used


def _slot_paths(run_root: Path, engine: EngineRecord) -> list[Path]:
    return [engines_dir(run_root) / f"slot-{engine.index}-{k}.lock" for k in range(engine.capacity)]


def acquire(
    run_root: Path | str,
    engines: list[EngineRecord],
    timeout_s: float | None = None,
    check: Callable[[EngineRecord], bool] = alive,
    pressure: Callable[[EngineRecord], str | None] | None = None,
) -> Slot:
    """Block until a slot of a live engine is free; hold it. :class:`NoEngineLeft` if none.

    ``check(engine)`` tells whether the engine answers (a ping, checked on every placement);
    ``pressure(engine)``, when given, why the engine takes no new instance now (or None).
    """
    root = Path(run_root)
    engines_dir(root).mkdir(parents=True, exist_ok=True)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        live = [e for e in engines if e.reachable and e.capacity > 0 and not is_lost(root, e.index)]
        if not live:
            raise NoEngineLeft("every engine of the run is lost or unreachable")
        loads = sorted((_used(_slot_paths(root, e)) / e.capacity, e.index, e) for e in live)
        for load, _, engine in loads:
            if load >= 1:
                continue
            if pressure is not None and pressure(engine) is not None:
                continue
            for path in _slot_paths(root, engine):
                fd = _try_lock(path)
                if fd is None:
                    continue
                if not check(engine):
                    os.close(fd)
                    mark_lost(root, engine.index, "did not answer a ping at placement")
                    break
                return Slot(engine, root, fd)
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError("no engine slot became free")
        time.sleep(POLL_S)


@contextmanager
def placed(slot: Slot) -> Iterator[Slot]:
    """Make ``slot`` this process's active slot while the block runs (``os.environ`` stays
    as it is: clients and subprocesses get the engine from :func:`instance_environment`)."""
    previous = swap(slot)
    try:
        yield slot
    finally:
        swap(previous)


def active() -> Slot | None:
    """The slot of the instance running in this process, if the run places instances."""
    slot = current()
    return slot if isinstance(slot, Slot) else None


def controller_environment() -> dict[str, str]:
    """The environment the run started with (its ``DOCKER_HOST`` is the controller's engine)."""
    return dict(os.environ)


__all__ = [
    "NoEngineLeft",
    "Slot",
    "acquire",
    "active",
    "controller_environment",
    "instance_environment",
    "is_lost",
    "mark_lost",
    "placed",
]
