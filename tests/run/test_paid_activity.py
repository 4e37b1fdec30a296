"""Issue 14 point 3: every row (interrupted ones too) says whether the agent spent anything."""

from __future__ import annotations

from harness.core.models import Tokens
from harness.runner.instance import InstanceResult, paid_activity


def test_interrupted_rows_carry_paid_activity() -> None:
    never = InstanceResult()
    assert paid_activity(never) is False  # interrupted before the agent started
    started = InstanceResult(agent_started=True)
    assert paid_activity(started) is None  # started, nothing says what it spent: unknown
    free = InstanceResult(agent_started=True, cost_usd=0.0, cost_known=True)
    assert paid_activity(free) is False
    paid = InstanceResult(agent_started=True, cost_usd=0.42)
    assert paid_activity(paid) is True
    tokens = InstanceResult(agent_started=True, tokens=Tokens(prompt=10, completion=2))
    assert paid_activity(tokens) is True
