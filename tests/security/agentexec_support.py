"""Shared helpers of the agent-exec attack tests: an adversarial ``--agent command`` run on
the ProgramBench fixture (real Docker, real ``programbench`` CLI), and its row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.programbench import FIXTURE_ID
from tests.support.suite import Run, run_pytest

TARGET = "benchmarks/programbench"


def attack(root: Path, command: str, *args: str) -> tuple[Run, dict[str, Any]]:
    """Run ``command`` as the agent on the fixture; the run and the fixture's row."""
    run = run_pytest(TARGET, root, "--pb-fixtures", "-k", "calculator", "--agent", "command",
                     "--agent-command", command, *args)
    assert FIXTURE_ID in run.latest, run.out[-3000:]
    return run, run.latest[FIXTURE_ID]


def assert_agent_outcome(run: Run, row: dict[str, Any], reason: str) -> None:
    """The row is the agent's failure with ``reason``: never infrastructure."""
    assert row["infra"] is False, (row["status"], row["reason_code"], row.get("error"))
    assert row["status"] != "infra_failed" and row["outcome"] == "agent_failed", row["outcome"]
    assert row["reason_code"] == reason, (row["reason_code"], row.get("error"))
    assert row["resolved"] is False
    # the run settled: a resume has nothing to retry for free
    assert run.manifest["counts"].get("infra_failed", 0) == 0, run.manifest["counts"]


def command_record(run: Run, row: dict[str, Any]) -> dict[str, Any]:
    path = run.root / row["output_paths"]["agent_command"]
    return dict(json.loads(path.read_text()))
