"""The joint machine (issue 41): runs, kills, resumes that raise K or narrow, shards and
merges, in orders Hypothesis picks, with the run model's invariants after every step. The
default tier plays a fixed set of examples; the slow tier ten times more, at random."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.runner.joint_machine import JointMachine

# no deadline (a step is a pytest run), no example database (nothing written in the tree)
COMMON = settings(deadline=None, database=None, stateful_step_count=6,
                  suppress_health_check=list(HealthCheck))


def test_the_joints_hold_on_a_fixed_set_of_examples() -> None:
    run_state_machine_as_test(JointMachine, settings=settings(
        COMMON, max_examples=8, derandomize=True))


@pytest.mark.slow
def test_the_joints_hold_on_ten_times_more_examples_at_random() -> None:
    run_state_machine_as_test(JointMachine, settings=settings(COMMON, max_examples=80))
