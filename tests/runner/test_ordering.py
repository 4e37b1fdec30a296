"""Longest first, the pure half (harness.run.ordering) and its use on items
(harness.runner.order): which estimates count, the order, the dealing rule."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.core.adapter import InstanceSpec
from harness.run import ordering
from harness.runner import order
from harness.runner.worker import SPEC_KEY

pytestmark = pytest.mark.usefixtures("no_git")


def ledger(root: Path, rows: list[dict[str, Any]], tail: str = "") -> str:
    root.mkdir(parents=True, exist_ok=True)
    (root / "result_index.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows) + tail)
    return str(root)


def test_durations_are_the_last_measured_ones_and_later_roots_win(tmp_path: Path) -> None:
    first = ledger(tmp_path / "a", [
        {"instance_id": "x", "duration_s": 10, "outcome": "scored"},
        {"instance_id": "x", "duration_s": 30, "outcome": "agent_failed"},  # last row wins
        {"instance_id": "y", "duration_s": 5, "outcome": "scored"},
    ])
    second = ledger(tmp_path / "b", [{"instance_id": "y", "duration_s": 7.5,
                                      "outcome": "infra_failed"}], tail='{"instance_id": "z", "dur')
    assert ordering.ledger_durations([first, second]) == {"x": 30.0, "y": 7.5}
    assert ordering.ledger_durations([second, first]) == {"x": 30.0, "y": 5.0}


def test_rows_that_did_not_run_the_instance_give_no_duration(tmp_path: Path) -> None:
    """A carried or skipped row took no time; a zero or missing duration says nothing. The
    earlier measurement stands."""
    root = ledger(tmp_path / "a", [
        {"instance_id": "x", "duration_s": 40, "outcome": "scored"},
        {"instance_id": "x", "duration_s": 0.0, "outcome": "carried"},
        {"instance_id": "x", "duration_s": 3, "outcome": "skipped"},
        {"instance_id": "y", "duration_s": 0, "outcome": "scored"},
        {"instance_id": "z", "duration_s": None, "outcome": "blocked"},
        {"instance_id": 7, "duration_s": 9, "outcome": "scored"},
    ], tail="\n[1, 2]\n\n")
    assert ordering.ledger_durations([root]) == {"x": 40.0}


def test_a_root_without_a_ledger_is_named(tmp_path: Path) -> None:
    with pytest.raises(ordering.DurationsError, match=r"--durations-from .*nope: no result_index"):
        ordering.ledger_durations([tmp_path / "nope"])
    with pytest.raises(pytest.UsageError, match="nope"):  # the plugin's face: a usage error
        order.ledger_durations([str(tmp_path / "nope")])


def test_a_measured_duration_beats_difficulty_and_difficulty_counts_only_alone() -> None:
    assert ordering.estimate("x", {"difficulty": "easy"}, {"x": 100.0}) == 100.0
    # Some durations known: an unmeasured instance is unknown (seconds and levels do not mix).
    assert ordering.estimate("y", {"difficulty": "hard"}, {"x": 100.0}) is None
    assert ordering.estimate("y", {"difficulty": "hard"}, {}) == ordering.DIFFICULTY["hard"]
    assert ordering.estimate("y", {"difficulty": "legendary"}, {}) is None
    assert ordering.estimate("y", {"difficulty": ["hard"]}, {}) is None
    assert ordering.estimate("y", {}, {}) is None


def test_longest_first_is_stable_with_unknown_first() -> None:
    assert ordering.longest_first([1.0, 5.0, 3.0, 5.0]) == [1, 3, 2, 0]
    assert ordering.longest_first([2.0, None, 9.0, None]) == [1, 3, 2, 0]
    assert ordering.longest_first([None, None]) is None  # nothing known: the given order
    assert ordering.longest_first([]) is None


def test_the_first_deal_is_round_robin_and_top_up_keeps_two() -> None:
    assert ordering.first_deal(["a", "b", "c"]) == ["a", "b", "c", "a", "b", "c"]
    assert ordering.first_deal(["a", "b"], hold=1) == ["a", "b"]
    assert [ordering.top_up(n) for n in range(4)] == [2, 1, 0, 0]


class Item:
    """As much of a pytest item as the order plugin reads (harness.runner.worker.item_spec)."""

    def __init__(self, iid: str, **markers: str) -> None:
        self.name = iid
        self.stash: dict[Any, Any] = {}
        self.callspec = SimpleNamespace(params={"harness_instance": InstanceSpec(iid, markers)})

    def get_closest_marker(self, name: str) -> Any:
        return SimpleNamespace(args=("bench",)) if name == "harness_benchmark" else None


class Other:
    """A test that is not a harness instance (a conftest's own test, say)."""

    name = "plain"
    stash: dict[Any, Any]
    callspec = None

    def __init__(self) -> None:
        self.stash = {}

    def get_closest_marker(self, name: str) -> Any:
        return None


def test_items_are_sorted_longest_first_in_place() -> None:
    items: list[Any] = [Item("a"), Item("b"), Other(), Item("c"), Item("d")]
    assert order.longest_first(items, {"a": 5.0, "b": 50.0, "d": 20.0})
    # unknown first (a non-instance and the unmeasured c, in their order), then 50, 20, 5
    assert [i.name for i in items] == ["plain", "c", "b", "d", "a"]
    assert all(SPEC_KEY in i.stash for i in items)


def test_difficulty_orders_items_when_no_run_is_given() -> None:
    items: list[Any] = [Item("e1", difficulty="easy"), Item("h1", difficulty="hard"),
                        Item("m1", difficulty="medium"), Item("h2", difficulty="hard")]
    assert order.longest_first(items, {})
    assert [i.name for i in items] == ["h1", "h2", "m1", "e1"]


def test_nothing_known_keeps_the_collection_order() -> None:
    items: list[Any] = [Item("b"), Item("a"), Other()]
    assert not order.longest_first(items, {})
    assert [i.name for i in items] == ["b", "a", "plain"]
