"""The joint machine (issue 41): runs, kills, resumes that raise K or narrow, shards and
merges, in orders Hypothesis picks, with the run model's invariants after every step. The
default tier plays a fixed set of examples; the slow tier ten times more, at random."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.runner.joint_machine import JointMachine
from tests.support.suite import Run

# no deadline (a step is a pytest run), no example database (nothing written in the tree)
COMMON = settings(deadline=None, database=None, stateful_step_count=6,
                  suppress_health_check=list(HealthCheck))


def test_the_joints_hold_on_a_fixed_set_of_examples() -> None:
    run_state_machine_as_test(JointMachine, settings=settings(
        COMMON, max_examples=8, derandomize=True))


@pytest.mark.slow
def test_the_joints_hold_on_ten_times_more_examples_at_random() -> None:
    run_state_machine_as_test(JointMachine, settings=settings(COMMON, max_examples=80))


class First:
    """A draw that takes the first choice (the rules' ``data`` for a fixed sequence)."""

    def draw(self, strategy: object) -> object:
        values = getattr(strategy, "elements", None)
        if values is not None:  # st.sampled_from
            return values[0]
        return 1  # st.integers(1, n)


def test_a_chain_moved_to_another_machine_resumes_merges_and_reports() -> None:
    """``move`` on a killed sharded run: the resume of the moved tip finds its ancestors by
    name (the originals are gone), then its merge and report hold the joints."""
    machine = JointMachine()
    try:
        machine.run_sharded(k=2, kill=0.3)
        chain = next(c for c in machine.chains if c.roots)
        machine.move(First())  # type: ignore[arg-type]
        assert chain.roots and all("machine-1" in str(r) for r in chain.roots)
        machine.resume(First(), grow=1, narrow=False, kill=None)  # type: ignore[arg-type]
        assert len(chain.roots) >= 2
        machine.chains_hold()
        machine.merge(First())  # type: ignore[arg-type]
        machine.report(First())  # type: ignore[arg-type]
    finally:
        machine.teardown()


class KillAfterARow(JointMachine):
    """A kill lands once the run's first row is on disk (not after a time: a loaded machine
    may not have frozen the selection by then)."""

    def _wait_to_kill(self, proc: Any, root: Path, kill: float) -> None:
        ledger = root / "result_index.jsonl"
        deadline = time.monotonic() + 120
        while not (ledger.is_file() and ledger.read_bytes().count(b"\n")):
            assert time.monotonic() < deadline and proc.poll() is None, "no row was written"
            time.sleep(0.02)


def test_a_paid_chain_killed_moved_and_resumed_keeps_its_money_exact() -> None:
    """``run_paid`` killed mid-run, moved to another machine, resumed with a larger K: the
    resume takes the dead run's custody over by its run id (its root moved), the campaign
    charges each run what its rows say, and nothing stays open."""
    machine = KillAfterARow()
    try:
        machine.run_paid(k=1, kill=0.3)
        [chain] = machine.chains
        assert chain.campaign is not None and chain.roots and chain.killed == [True]
        machine.money_holds()
        machine.move(First())  # type: ignore[arg-type]
        machine.resume(First(), grow=1, narrow=False, kill=None)  # type: ignore[arg-type]
        assert len(chain.roots) == 2
        machine.chains_hold()
        machine.money_holds()
        state = json.loads(chain.campaign.read_text())
        assert state["active_runs"] == {} and len(state["runs"]) == 2, state
        assert state["runs"][0]["taken_over_by"] == Run.of(chain.tip).manifest["run_id"]
        state["runs"][1]["settled_usd"] += 0.5  # a unit charged twice: the invariant says so
        chain.campaign.write_text(json.dumps(state))
        with pytest.raises(AssertionError):
            machine.money_holds()
    finally:
        machine.teardown()

