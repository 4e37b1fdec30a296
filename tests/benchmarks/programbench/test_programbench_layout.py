"""A published cleanroom image's layout (no agent user, root-owned /workspace, no git
repository, a short PATH) is adapted by the runner, recorded in the row, and the instance is
scored by the official eval like any other."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.programbench import FIXTURE_ID
from tests.support.suite import run_pytest

# slow tier: a minute or more each on this engine (CI runs it after the default tier)
pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_cleanroom_layout_is_adapted_and_scored(tmp_path: Path) -> None:
    run = run_pytest("benchmarks/programbench", tmp_path / "run", "--pb-fixtures", "-k", "calculator",
                     "--agent", "oracle", "--pb-fixture-layout", "cleanroom")
    assert run.rc == 0, run.out
    row = run.latest[FIXTURE_ID]
    assert row["score"] == 1.0 and row["resolved"] is True
    preflight = row["details"]["programbench"]["preflight"]
    adapted = preflight["layout_adapted"]
    assert "created_agent_user" in adapted and "workspace_owner_0_to_1000" in adapted
    assert preflight["agent_capabilities"]["CapEff"] == "0000000000000000"
