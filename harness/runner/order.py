"""pytest plugin: run the longest instances first (``--order``, ``--durations-from``).

With hour-long, uneven instances the tail decides the wall time. Estimates come from earlier
runs' ledgers (``--durations-from RUN_ROOT...``: each instance's last measured
``duration_s``) or, else, from benchmark metadata (a ``difficulty`` marker: hard > medium >
easy). ``--order auto`` (default) is ``longest-first`` when some estimate is known, else the
given order; ``--order given`` keeps the collection order.

Two parts, both needed: the items are sorted longest first (stably; unknown estimates go
first, they may be long), identically in every xdist worker; and under ``-n`` with the
default ``load`` distribution the controller uses :class:`LongestFirstScheduling`, which
hands the sorted items out one at a time (round robin, each worker holding at most the item
it runs and the next one) instead of xdist's consecutive chunks, which would give the two
longest items to one worker. Placement over engines follows the same order (instances take
engine slots as they start).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.runner.worker import item_spec

ORDERS = ("auto", "longest-first", "given")
DIFFICULTY = {"easy": 1.0, "medium": 2.0, "hard": 3.0}
HOLD = 2  # an xdist worker runs an item only once it knows the next one


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("harness")
    group.addoption("--order", choices=ORDERS, default="auto",
                    help="instance order: longest-first (estimates from --durations-from or "
                         "difficulty), given; auto (default): longest-first when known")
    group.addoption("--durations-from", action="extend", nargs="+", default=[],
                    metavar="RUN_ROOT", help="earlier run roots whose ledgers give durations")


def ledger_durations(roots: list[str]) -> dict[str, float]:
    """instance id -> its last measured duration in the given runs' ledgers (later roots win)."""
    out: dict[str, float] = {}
    for root in roots:
        path = Path(root) / "result_index.jsonl"
        if not path.is_file():
            raise pytest.UsageError(f"--durations-from {root}: no result_index.jsonl there")
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line
            dur, iid = row.get("duration_s"), row.get("instance_id")
            if isinstance(iid, str) and isinstance(dur, (int, float)) and dur > 0 and \
                    row.get("outcome") not in ("skipped", "carried"):
                out[iid] = float(dur)
    return out


def _estimate(item: pytest.Item, durations: dict[str, float]) -> float | None:
    found = item_spec(item)
    if found is None:
        return None
    spec = found[1]
    if spec.instance_id in durations:
        return durations[spec.instance_id]
    level = spec.markers.get("difficulty") if not durations else None
    return DIFFICULTY.get(level) if isinstance(level, str) else None


def longest_first(items: list[pytest.Item], durations: dict[str, float]) -> bool:
    """Sort ``items`` longest first in place; False (untouched) when nothing is known."""
    estimates = {item: _estimate(item, durations) for item in items}
    if all(e is None for e in estimates.values()):
        return False
    def key(item: pytest.Item) -> float:
        value = estimates[item]
        return -(float("inf") if value is None else value)

    items.sort(key=key)
    return True


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    order = config.getoption("order", "auto")
    if order == "given":
        return
    durations = ledger_durations(list(config.getoption("durations_from", []) or []))
    longest_first(items, durations)


def _wants_scheduler(config: pytest.Config) -> bool:
    if getattr(config.option, "dist", "no") != "load":
        return False
    if config.getoption("order", "auto") == "longest-first":
        return True
    return config.getoption("order", "auto") == "auto" and bool(
        config.getoption("durations_from", []))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if not _wants_scheduler(config):
        return None
    return make_scheduler(config, log)


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScheduling

    class LongestFirstScheduling(LoadScheduling):  # type: ignore[misc]
        """Deal items one at a time in collection order; each worker holds at most two."""

        def schedule(self) -> None:
            assert self.collection_is_completed
            if getattr(self, "collection", None) is not None:
                for node in self.nodes:
                    self.check_schedule(node)
                return
            if not self._check_nodes_have_same_collection():
                self.log("**Different tests collected, aborting run**")
                return
            collection: list[str] = next(iter(self.node2collection.values()))
            self.collection = collection
            self.pending[:] = range(len(collection))
            for _ in range(HOLD):
                for node in self.nodes:
                    self._send_tests(node, 1)
            if not self.pending:
                for node in self.nodes:
                    node.shutdown()

        def check_schedule(self, node: Any, duration: float = 0) -> None:
            if node.shutting_down:
                return
            if self.pending:
                missing = HOLD - len(self.node2pending[node])
                if missing > 0:
                    self._send_tests(node, missing)
            else:
                node.shutdown()

    return LongestFirstScheduling(config, log)
