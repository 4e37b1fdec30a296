"""The longest-first xdist scheduler, driven in-process with small stand-in worker nodes (as
pytest-xdist tests its own scheduling): who gets which item, when, and that every item is
sent exactly once."""

from __future__ import annotations

import heapq
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest
from xdist.scheduler import LoadScheduling

from harness.runner import order

pytestmark = pytest.mark.usefixtures("no_git")


class Node:
    """A worker as the scheduler sees it: an id, what it was sent, whether it shuts down."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True

    def __repr__(self) -> str:
        return f"Node({self.gateway.id})"


class Config:
    """The options xdist's scheduling reads (``--tx``, ``--maxschedchunk``), and the hook
    it reports a collection mismatch to."""

    def __init__(self, workers: int, **options: Any) -> None:
        self.option = SimpleNamespace(dist="load", order="auto", durations_from=[], **options)
        self.reports: list[Any] = []
        self.hook = SimpleNamespace(pytest_collectreport=lambda report: self.reports.append(report))
        self.tx = [f"{workers}*popen"]

    def getvalue(self, name: str) -> Any:
        return self.tx if name == "tx" else getattr(self.option, name)

    def getoption(self, name: str, default: Any = None) -> Any:
        return {"maxschedchunk": None}.get(name, getattr(self.option, name, default))


def started(workers: int, items: int, make: Any = order.make_scheduler) -> tuple[Any, list[Node]]:
    config: Any = Config(workers)
    sched = make(config, None)
    nodes = [Node(f"gw{i}") for i in range(workers)]
    collection = [f"bench.py::test_instance[i{n}]" for n in range(items)]
    for node in nodes:
        sched.add_node(node)
    for node in nodes:
        sched.add_node_collection(node, collection)
    assert sched.collection_is_completed
    sched.schedule()
    return sched, nodes


def test_the_longest_items_go_to_different_workers() -> None:
    """Items arrive sorted longest first: xdist's own chunks would give items 0 and 1 to one
    worker; the harness deals them one at a time."""
    sched, (a, b) = started(2, 8)
    assert (a.sent, b.sent) == ([0, 2], [1, 3])
    assert sched.pending == [4, 5, 6, 7]
    _, (c, _) = started(2, 8, make=LoadScheduling)
    assert c.sent[:2] == [0, 1]  # what the harness avoids


def test_a_worker_holds_at_most_two_and_gets_the_next_in_order() -> None:
    sched, (a, b) = started(2, 8)
    sched.mark_test_complete(b, 1)
    assert b.sent == [1, 3, 4] and sched.node2pending[b] == [3, 4]
    sched.mark_test_complete(a, 0)
    assert a.sent == [0, 2, 5]
    sched.mark_test_complete(a, 2, duration=3600.0)  # a long item does not change the rule
    assert a.sent == [0, 2, 5, 6] and sched.node2pending[a] == [5, 6]


def test_every_item_is_sent_once_and_the_workers_then_shut_down() -> None:
    sched, nodes = started(3, 10)
    running = {n: list(n.sent) for n in nodes}
    while sched.has_pending:
        for node in nodes:
            if sched.node2pending[node]:
                sched.mark_test_complete(node, sched.node2pending[node][0])
    sent = Counter(i for n in nodes for i in n.sent)
    assert sorted(sent) == list(range(10)) and set(sent.values()) == {1}
    assert all(n.shutting_down for n in nodes) and sched.tests_finished
    assert all(len(first) == 2 for first in running.values())  # each started with two


def test_fewer_items_than_places_are_dealt_and_everyone_shuts_down() -> None:
    sched, (a, b, c) = started(3, 4)
    assert (a.sent, b.sent, c.sent) == ([0, 3], [1], [2])
    assert not sched.pending and all(n.shutting_down for n in (a, b, c))


def test_an_empty_collection_shuts_every_worker_down() -> None:
    _, nodes = started(2, 0)
    assert all(n.shutting_down and not n.sent for n in nodes)


def test_workers_that_collected_different_items_get_nothing() -> None:
    config: Any = Config(2)
    sched = order.make_scheduler(config, None)
    a, b = Node("gw0"), Node("gw1")
    sched.add_node(a)
    sched.add_node(b)
    sched.add_node_collection(a, ["t[x]", "t[y]"])
    sched.add_node_collection(b, ["t[y]", "t[x]"])  # another order: another sort
    sched.schedule()
    assert not a.sent and not b.sent
    assert [r.outcome for r in config.reports] == ["failed"]


def test_a_crashed_workers_next_item_goes_to_another_worker_once() -> None:
    sched, (a, b) = started(2, 6)
    crashed = sched.remove_node(a)  # a died running item 0, holding item 2
    assert crashed == "bench.py::test_instance[i0]"  # the controller writes its row
    assert b.sent == [1, 3] and 2 in sched.pending  # queued again (at the end, as xdist does)
    while sched.has_pending:
        sched.mark_test_complete(b, sched.node2pending[b][0])
    sent = Counter(b.sent)
    assert sorted(sent) == [1, 2, 3, 4, 5] and set(sent.values()) == {1}  # 0 not run again
    assert b.shutting_down


def test_a_worker_that_joins_later_is_fed() -> None:
    sched, (a, b) = started(2, 8)
    late = Node("gw2")
    sched.add_node(late)
    sched.schedule()  # xdist calls it again for a new node
    assert late.sent == [4, 5] and (a.sent, b.sent) == ([0, 2], [1, 3])


def simulate(make: Any, durations: list[float], workers: int) -> float:
    """Run the items on stand-in workers, each running its items in the order sent and
    telling the scheduler as it finishes one; the wall time."""
    sched, nodes = started(workers, len(durations), make=make)
    clock = 0.0
    busy: list[tuple[float, int, int]] = []  # (end, node, item)
    running: dict[int, int] = {}

    def start_next(n: int) -> None:
        node = nodes[n]
        queue = [i for i in node.sent if i in sched.node2pending[node]]
        if n not in running and queue:
            running[n] = queue[0]
            heapq.heappush(busy, (clock + durations[queue[0]], n, queue[0]))

    for n in range(workers):
        start_next(n)
    while busy:
        clock, n, item = heapq.heappop(busy)
        del running[n]
        sched.mark_test_complete(nodes[n], item)
        for m in range(workers):
            start_next(m)
    return clock


def test_longest_first_dealing_shortens_the_wall_time() -> None:
    """Two long instances and many short ones on two workers: dealt one at a time the long
    ones run side by side and the short ones fill in (the best possible, half the total
    work); xdist's chunks put both long ones on one worker."""
    durations = [60.0, 50.0] + [1.0] * 20
    assert simulate(order.make_scheduler, durations, 2) == sum(durations) / 2
    assert simulate(LoadScheduling, durations, 2) >= 110.0


@pytest.mark.parametrize(("dist", "order_", "durations_from", "wanted"), [
    ("load", "longest-first", [], True),
    ("load", "auto", ["old-run"], True),
    ("load", "auto", [], False),  # difficulty only: xdist's own scheduling
    ("load", "given", ["old-run"], False),
    ("loadscope", "longest-first", [], False),
    ("no", "longest-first", [], False),
])
def test_the_scheduler_is_used_only_for_load_with_an_order(
        dist: str, order_: str, durations_from: list[str], wanted: bool) -> None:
    config: Any = Config(2)
    config.option.dist, config.option.order = dist, order_
    config.option.durations_from = durations_from
    sched = order.pytest_xdist_make_scheduler(config, None)
    assert (sched is not None) is wanted
    if wanted:
        assert isinstance(sched, order.LongestFirstScheduling)
        assert isinstance(sched, LoadScheduling)
