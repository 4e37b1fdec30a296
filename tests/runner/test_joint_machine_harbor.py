"""The joint machine on Harbor runs (issue 42): the same rules and invariants as on the
selftest benchmark (tests/runner/test_joint_machine.py), in real Docker. A fixed sequence
(a sharded run killed mid-shard, its resume, the merge, the report), and a few examples at
random. Both are in the slow tier: a Harbor run of three units takes ten seconds."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from tests.runner.joint_harbor import SCORES, HarborJointMachine
from tests.runner.joint_machine import NOT_FINAL, merged_scores, unit
from tests.runner.test_joint_machine import COMMON
from tests.support.forkrun import ForkedProcess
from tests.support.suite import Run, wait_for

pytestmark = [pytest.mark.docker, pytest.mark.slow]


class Pick:
    """A draw that takes the choice at ``index`` (the rules' ``data`` for a fixed sequence);
    ``st.integers(1, n)`` draws 1."""

    def __init__(self, index: int = 0) -> None:
        self.index = index

    def draw(self, strategy: object) -> object:
        values = getattr(strategy, "elements", None)
        return 1 if values is None else values[self.index]


def settled(root: Path) -> list[str]:
    ledger = root / "result_index.jsonl"
    if not ledger.is_file():
        return []
    return [r["instance_id"] for r in Run.of(root).rows if r["outcome"] not in NOT_FINAL]


class KilledMidRun(HarborJointMachine):
    """A kill that lands once the run's first unit settled and the next one's sandbox is
    up (not at a time a loaded machine may reach before the run froze its selection, or
    after its end)."""

    def _wait_to_kill(self, proc: ForkedProcess, root: Path, kill: float) -> None:
        def one_row_and_a_sandbox() -> bool:
            assert proc.poll() is None, "the run ended before its kill"
            return bool(settled(root)) and root in self.bench.leftover()

        wait_for(one_row_and_a_sandbox, timeout=300, interval=0.05)


def test_a_sharded_harbor_run_killed_resumed_merged_and_reported() -> None:
    machine = KilledMidRun()
    try:
        machine.run_sharded(k=1, kill=0.5)  # shard 2 (two tasks) killed in its second
        machine.chains_hold()
        machine.engine_holds()
        killed = machine.chains[1]
        assert len(killed.roots) == 1 and killed.killed == [True]
        assert Run.of(killed.tip).manifest["exit_code"] is None  # never finalized
        before = settled(killed.tip)
        assert len(before) == 1, before
        assert killed.tip in machine.bench.leftover()  # the kill left the unit's sandbox
        machine.resume(Pick(1), grow=0, narrow=False, kill=None)  # type: ignore[arg-type]
        machine.chains_hold()
        machine.engine_holds()
        assert len(killed.roots) == 2
        resumed = Run.of(killed.tip)
        assert resumed.manifest["exit_code"] == 0
        assert resumed.latest[before[0]]["outcome"] == "carried_forward"
        assert machine.bench.leftover() == {}  # the resume swept what the kill left
        machine.merge(Pick())  # type: ignore[arg-type]
        machine.engine_holds()
        [merged] = machine.merged
        assert merged_scores(merged) == {unit(t): s for t, (s, _) in SCORES.items()}
        machine.report(Pick(-1))  # type: ignore[arg-type]  # the merged run's report
        assert machine.reports == 1
    finally:
        machine.teardown()


def test_the_joints_hold_on_harbor_on_a_few_examples_at_random() -> None:
    run_state_machine_as_test(HarborJointMachine, settings=settings(
        COMMON, max_examples=3, stateful_step_count=5))
