"""Issue 45, infrastructure that hangs, in ProgramBench on the real engine: a submission
whose build never ends holds the official eval (``programbench eval``, real Docker) until
the eval phase's deadline. The instance is then ``phase_timeout: eval`` (infrastructure,
never a scored 0); the CLI's output of the cut eval is set aside, so neither the parity
check nor a resume reads it as a verdict; nothing of the run is left on the engine and the
budget hold is released."""

from __future__ import annotations

import json
from pathlib import Path

import docker
import pytest

from benchmarks.programbench import FIXTURE_ID
from tests.support.suite import run_pytest

pytestmark = pytest.mark.docker
HANG = ("printf '#!/bin/sh\\nsleep 3600\\n' > /workspace/compile.sh; "
        "chmod +x /workspace/compile.sh")


def test_an_eval_that_hangs_ends_at_its_deadline(tmp_path: Path) -> None:
    campaign = tmp_path / "campaign.json"
    run = run_pytest("benchmarks/programbench", tmp_path / "run", "--pb-fixtures", "-k",
                     "calculator", "--agent", "command", "--agent-command", HANG,
                     "--retry-infra", "0", "--phase-timeout", "eval=15",
                     "--campaign-file", str(campaign), "--campaign-budget-usd", "5",
                     "--per-task-reserve-usd", "1", "--unknown-cost-allowance-usd", "1",
                     timeout=600)
    rows = [r for r in run.rows if r["instance_id"] == FIXTURE_ID]
    assert len(rows) == 1, rows  # no parity row read the cut eval's output as a verdict
    row = rows[0]
    assert (row["outcome"], row["reason_code"]) == ("infra_failed", "phase_timeout"), row
    assert "phase_timeout: eval (past its deadline of 15 s" in row["error"]
    assert row["score"] is None
    folder = run.root / "programbench" / FIXTURE_ID
    assert not list(folder.glob("*.eval.json"))
    assert row["details"]["eval"]["interrupted"] == [f"{FIXTURE_ID}.eval.json"]
    assert (folder / f"{FIXTURE_ID}.eval.json.interrupted").is_file()
    left = docker.from_env().containers.list(
        all=True, filters={"label": f"harness.run={run.manifest['run_id']}"})
    assert left == []
    state = json.loads(campaign.read_text())
    assert state["outstanding_usd"] == pytest.approx(0.0, abs=1e-12)
