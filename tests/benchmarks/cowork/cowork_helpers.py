"""Builders of Cowork instance folders for the unit tests (the files the phases write)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.cowork_bench import models as m
from benchmarks.cowork_bench.eval_once import CheckerRequest, CheckerRun
from harness.core.fsutil import atomic_write_json
from harness.core.models import GitState, Manifest, Outcome, Selection, TaskRow, Versions

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "cowork_mini"


def write_agent_phase(
    inst: Path,
    iid: str = "excel-sales-summary",
    *,
    status: str = "success",
    reason: str | None = None,
    infra_reason: str | None = None,
    container_state: str = "absent",
    workspace: dict[str, str] | None = None,
) -> None:
    inst.mkdir(parents=True, exist_ok=True)
    (inst / m.WORKSPACE_DIR).mkdir(exist_ok=True)
    for name, text in (workspace or {"out.txt": "hello"}).items():
        (inst / m.WORKSPACE_DIR / name).write_text(text)
    (inst / m.PREPROCESS_LOG).write_text("[preprocess] ok\n")
    config = m.TrajConfig(task_dir=iid, id=iid, launch_time="2026-03-01 10:00:00 Sunday")
    atomic_write_json(inst / m.TRAJ_LOG, m.TrajLog(config=config, status=status))
    summary = m.AgentSummary.model_validate(
        {
            "instance_id": iid,
            "agent": "test",
            "bench_status": status,
            "reason_code": reason,
            "infra_failed": infra_reason is not None,
            "infra_reason": infra_reason,
            "launch_time": "2026-03-01 10:00:00",
            "started_at": "2026-03-01T10:00:00+00:00",
            "finished_at": "2026-03-01T10:05:00+00:00",
            "agent_container_state": container_state,
        }
    )
    atomic_write_json(inst / m.AGENT_SUMMARY, summary)


def write_events(inst: Path, records: list[dict[str, Any]], name: str = "events.jsonl") -> None:
    logdir = inst / m.AGENT_LOG_DIR
    logdir.mkdir(parents=True, exist_ok=True)
    with open(logdir / name, "a", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")


class CountingChecker:
    """A fake checker runner (no Docker) that counts its invocations."""

    def __init__(self, exit_code: int = 0, stdout: str = "  [PASS] fake\n") -> None:
        self.calls: list[CheckerRequest] = []
        self.exit_code = exit_code
        self.stdout = stdout

    def __call__(self, req: CheckerRequest) -> CheckerRun:
        self.calls.append(req)
        res_log = Path(req.scratch_dir) / "res_log.json"
        res_log.write_text(json.dumps({"total_passed": 1, "total_checks": 1, "accuracy": 100}))
        return CheckerRun(exit_code=self.exit_code, stdout=self.stdout, res_log_path=str(res_log))


# --------------------------------------------------------------------------- run roots

T0 = 1_790_000_000.0
OUTCOME_OF_STATUS = {"passed": Outcome.SCORED, "failed": Outcome.SCORED,
                     "agent_failed": Outcome.AGENT_FAILED, "infra_failed": Outcome.INFRA_FAILED,
                     "skipped": Outcome.CARRIED}  # fmt: skip


def run_manifest(root: Path, run_id: str, iids: list[str], **fields: Any) -> Manifest:
    """A finished run's manifest selecting ``cowork_bench/<iid>`` for each of ``iids``."""
    keys = [f"cowork_bench/{i}" for i in iids]
    data: dict[str, Any] = {
        "run_id": run_id, "run_root": str(root), "created_at_unix": T0,
        "created_at": "2026-09-21T10:13:20+00:00", "argv": ["pytest", "benchmarks/cowork_bench"],
        "cwd": str(root), "benchmarks": ["cowork_bench"],
        "versions": Versions(harness="0.1.0", python="3.11.7", pytest="9.2.0", platform="linux"),
        "source": GitState(available=True, head="0123456789abcdef", dirty=False),
        "selection": Selection(resolved=True, instance_ids=keys, count=len(keys),
                               source="collection"),
        "outcome": "completed", "exit_code": 0,
    }  # fmt: skip
    data.update(fields)
    return Manifest(**data)


def ledger_row(iid: str, status: str, reason: str, run_id: str = "r1", **fields: Any) -> str:
    """One ``result_index.jsonl`` line (no newline) of a Cowork instance."""
    data: dict[str, Any] = {
        "ts_unix": T0 + 60, "run_id": run_id, "benchmark": "cowork_bench", "instance_id": iid,
        "status": status, "outcome": OUTCOME_OF_STATUS[status], "reason_code": reason,
        "infra": status == "infra_failed",
    }  # fmt: skip
    data.update(fields)
    return TaskRow(**data).dump_line()
