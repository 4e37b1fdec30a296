"""Scenario: a paid run's resume SIGKILLed while it is admitted (issue 42's joint machine
found it). The resume has taken the campaign custody over but its selection is not frozen,
so it leaves no run root to resume and an empty custody entry behind. The operator resumes
the earlier run again: that resume takes the entry over (before, it was refused as a stale
run), the chain's rows and the campaign agree (money exact, checked by the joint machine's
invariants), and nothing stays open. The selftest benchmark, no Docker."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tests.runner.joint_machine import JointMachine
from tests.runner.test_joint_machine import First


class KillWhenAdmitted(JointMachine):
    """A kill lands as soon as the run holds its campaign custody: before its selection is
    frozen (on this bench collection takes longer than that window)."""

    def _wait_to_kill(self, proc: Any, root: Path, kill: float) -> None:
        campaign = next(c.campaign for c in self.chains if c.campaign is not None)
        deadline = time.monotonic() + 120
        while True:
            assert time.monotonic() < deadline and proc.poll() is None, "never admitted"
            try:
                active = json.loads(campaign.read_text())["active_runs"].values()
            except (OSError, ValueError):
                active = []
            if any(a["run_root"] == str(root) for a in active):
                return
            time.sleep(0.005)


def test_a_resume_killed_while_admitted_leaves_the_chain_resumable() -> None:
    """A finished paid run; its resume SIGKILLed while admitted (no selection frozen: no
    root to resume, an empty custody entry left); the run resumed again takes that entry
    over, and the money holds."""
    machine = KillWhenAdmitted()
    try:
        machine.run_paid(k=1, kill=None)
        [chain] = machine.chains
        machine.resume(First(), grow=1, narrow=False, kill=0.1)  # type: ignore[arg-type]
        assert len(chain.lost) == 1 and len(chain.roots) == 1, (chain.lost, chain.roots)
        machine.money_holds()
        assert chain.campaign is not None
        assert len(json.loads(chain.campaign.read_text())["active_runs"]) == 1
        machine.resume(First(), grow=1, narrow=False, kill=None)  # type: ignore[arg-type]
        assert len(chain.roots) == 2, "the resume was refused"
        machine.chains_hold()
        machine.money_holds()
        state = json.loads(chain.campaign.read_text())
        assert state["active_runs"] == {}
        assert [r["outcome"] for r in state["runs"]][1] == "taken_over", state["runs"]
    finally:
        machine.teardown()
