"""pytest plugin: run the longest instances first (``--order``, ``--durations-from``).

With hour-long, uneven instances the tail decides the wall time. Estimates come from earlier
runs' ledgers (``--durations-from RUN_ROOT...``: each instance's last measured
``duration_s``) or, else, from benchmark metadata (a ``difficulty`` marker: hard > medium >
easy). ``--order auto`` (default) is ``longest-first`` when some estimate is known, else the
given order; ``--order given`` keeps the collection order.

Two parts, both needed: the items are sorted longest first (stably; unknown estimates go
first, they may be long), identically in every xdist worker; and under ``-n`` with the
default ``load`` distribution the controller uses ``LongestFirstScheduling``, which
hands the sorted items out one at a time (round robin, each worker holding at most the item
it runs and the next one) instead of xdist's consecutive chunks, which would give the two
longest items to one worker. Placement over engines follows the same order (instances take
engine slots as they start). The estimates, the order and the dealing rule are pure logic
(:mod:`harness.run.ordering`); this module applies them to pytest items and xdist nodes.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness.run import ordering
from harness.runner.worker import item_spec


def ledger_durations(roots: list[str | Path]) -> dict[str, float]:
    """instance id -> its last measured duration in the given runs' ledgers (later roots
    win); a root without a ledger is a usage error."""
    try:
        return ordering.ledger_durations(roots)
    except ordering.DurationsError as exc:
        raise pytest.UsageError(str(exc)) from None


def item_estimate(item: pytest.Item, durations: dict[str, float]) -> float | None:
    found = item_spec(item)
    if found is None:
        return None
    spec = found[1]  # an attempt's own measured duration, else its task's
    iid = spec.key_id if spec.key_id in durations else spec.instance_id
    return ordering.estimate(iid, spec.markers, durations)


def longest_first(items: list[pytest.Item], durations: dict[str, float]) -> bool:
    """Sort ``items`` longest first in place; False (untouched) when nothing is known."""
    order = ordering.longest_first([item_estimate(item, durations) for item in items])
    if order is None:
        return False
    items[:] = [items[i] for i in order]
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


def make_scheduler(config: pytest.Config, log: Any) -> LongestFirstDealing:
    return scheduler_class()(config, log)


# xdist is imported only here, when a scheduler is made: importing ``xdist`` imports
# ``xdist.plugin``, which freezes ``sys.path`` (tests.support.forkrun preloads this module
# before a run sets its path), and the collection path stays off execnet.
if TYPE_CHECKING:
    from xdist.scheduler import LoadScheduling as _LoadScheduling
else:
    _LoadScheduling = object


class LongestFirstDealing(_LoadScheduling):
    """What the longest-first scheduler changes in xdist's ``load`` scheduling: it deals the
    (already sorted) items one at a time in collection order, each worker holding at most
    :data:`harness.run.ordering.HOLD`, topped up as it finishes one.

    A mixin over xdist's ``LoadScheduling`` (:func:`scheduler_class` puts them together):
    it keeps ``LoadScheduling``'s bookkeeping (``pending``, ``node2pending``, node crashes,
    collection checks) and uses two of its private methods, ``_send_tests`` and
    ``_check_nodes_have_same_collection`` (tests/runner/test_scheduler.py fails if they
    change); it replaces only the two decisions, the first deal and the top-up."""

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
        for node in ordering.first_deal(self.nodes):
            self._send_tests(node, 1)
        if not self.pending:
            for node in self.nodes:
                node.shutdown()

    def check_schedule(self, node: Any, duration: float = 0) -> None:
        if node.shutting_down:
            return
        if self.pending:
            missing = ordering.top_up(len(self.node2pending[node]))
            if missing > 0:
                self._send_tests(node, missing)
        else:
            node.shutdown()


@functools.cache
def scheduler_class() -> type[LongestFirstDealing]:
    """``LongestFirstScheduling``: :class:`LongestFirstDealing` over xdist's
    ``LoadScheduling`` (one class, made on first use)."""
    from xdist.scheduler import LoadScheduling

    return type("LongestFirstScheduling", (LongestFirstDealing, LoadScheduling),
                {"__module__": __name__, "__doc__": LongestFirstDealing.__doc__})


def __getattr__(name: str) -> Any:
    if name == "LongestFirstScheduling":
        return scheduler_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
