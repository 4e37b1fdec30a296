"""The row's ``details`` are typed sections (harness.core.row_details): a wrong type is
refused, naming the section and field; a ledger written before the sections (flat keys)
still reads, its keys in their sections and a benchmark's own keys in its section; a
running instance's bag writes a section through its model; ``harness schema`` exports them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness.core.models import TaskRow
from harness.core.row_details import (
    AgentDetails,
    BudgetDetails,
    DetailsBag,
    EngineDetails,
    RowDetails,
    migrate,
)
from harness.run.ledger import ledger_path, read_ledger
from harness.run.resume import original_row

OLD = Path(__file__).resolve().parents[1] / "data" / "ledger_v1_flat"


def row(**details: object) -> TaskRow:
    return TaskRow(ts_unix=1.0, run_id="r", benchmark="pb", instance_id="i", status="s",
                   outcome="scored", details=details)


def test_an_old_ledger_reads_with_its_flat_keys_in_their_sections(tmp_path):
    shutil.copytree(OLD, tmp_path / "run")
    pb, cowork = read_ledger(ledger_path(tmp_path / "run")).rows
    d = pb.details
    assert (d.agent.kind, d.agent.cost_source, d.agent.task_id) == ("gateway", "gateway", "t-1")
    assert d.agent.details == {"steps": 4, "orphan_tasks": [{"task_id": "t-0", "cost_usd": 0.1}]}
    assert d.agent.wall_s == 9.25 and d.agent.outcome == {"completed": True, "reason": None}
    assert (d.budget.charged_usd, d.budget.earlier_attempts_usd, d.budget.overrun) == (
        0.75, 0.25, False)
    assert d.engine.url == "unix:///var/run/docker.sock" and d.engine.index == 0
    assert d.engine.image == {"ref": "pb/calc:1", "id": "sha256:11", "pulled": True}
    assert d.engine.container == "harness-c1"
    assert d.submission.sha256 == "aa" and d.submission.scorer_files_removed == ["conftest.py"]
    assert d.eval.timings == {"build_s": 1.5, "test_s": 2} and d.eval.error_code is None
    assert d.run.retry_of == {"attempt": 1, "reason_code": "docker_unavailable"}
    assert d.section("programbench") == {"executable_hash": "ffee"}  # the benchmark's own
    c = cowork.details
    assert c.run.carried_status == "passed" and c.eval.passed is True
    assert c.engine.cleanup == {"kept": True}
    assert c.section("cowork") == {"runtime_image": "sha256:rt", "cowork_status": "passed"}
    # readers not yet moved still read by the old flat names
    assert d.get("budget_charged_usd") == 0.75 and c.get("carried_status") == "passed"
    assert c.get("runtime_image") == "sha256:rt" and d["agent_details"]["steps"] == 4


def test_an_old_row_written_back_is_in_sections_and_reads_the_same():
    line = (OLD / "result_index.jsonl").read_text().splitlines()[0]
    old = TaskRow.model_validate_json(line)
    again = TaskRow.model_validate_json(old.dump_line())
    assert again == old
    details = json.loads(old.dump_line())["details"]
    assert set(details) == {"agent", "submission", "budget", "engine", "eval", "run",
                            "programbench"}
    assert details["budget"] == {"overrun": False, "charged_usd": 0.75,
                                 "earlier_attempts_usd": 0.25}
    # fields outside details are unchanged
    raw = json.loads(line)
    assert {k: v for k, v in json.loads(old.dump_line()).items() if k != "details"} == {
        k: v for k, v in raw.items() if k != "details"}


def test_a_carried_old_row_keeps_its_sections():
    line = (OLD / "result_index.jsonl").read_text().splitlines()[0]
    carried = original_row(TaskRow.model_validate_json(line))
    assert carried.details.run.carried_status == "resolved"
    assert carried.details.run.carried_outcome == "scored"
    assert carried.details.budget.charged_usd == 0.75


@pytest.mark.parametrize(("details", "where"), [
    ({"budget": {"overrun": "no"}}, "details.budget.overrun"),
    ({"budget_charged_usd": "lots"}, "details.budget.charged_usd"),  # an old flat key too
    ({"engine": {"index": "0"}}, "details.engine.index"),  # never coerced
    ({"agent": {"details": [1]}}, "details.agent.details"),
    ({"eval": {"pass": 1}}, "details.eval.pass"),
])
def test_a_wrong_type_is_refused_naming_its_section_and_field(details, where):
    with pytest.raises(ValidationError) as err:
        row(**details)
    assert where in str(err.value)


def test_a_wrong_type_is_refused_on_assignment_too():
    r = row()
    with pytest.raises(ValidationError, match="overrun"):
        r.details.budget.overrun = "yes"  # type: ignore[assignment]
    with pytest.raises(ValueError, match="runner section"):
        r.details.section("budget")


def test_a_new_row_writes_only_the_sections_and_fields_set():
    bag = DetailsBag()
    BudgetDetails(overrun=False, charged_usd=1).put(bag)
    EngineDetails(url="u", index=1).put(bag)
    EngineDetails(lost=True).put(bag)  # merged into the section
    AgentDetails(details={"orphan_tasks": []}).put(bag)
    AgentDetails().put(bag)  # nothing set: nothing written
    bag.setdefault("pb", {})["mine"] = 1  # the benchmark's section (Trial.details)
    bag["container"] = "c1"  # a writer not yet moved (flat): migrated at the row
    assert bag.get("agent_details") == {"orphan_tasks": []}  # read by its old name
    d = json.loads(row(**bag).dump_line())["details"]
    assert d == {"agent": {"details": {"orphan_tasks": []}},
                 "budget": {"overrun": False, "charged_usd": 1},
                 "engine": {"url": "u", "index": 1, "lost": True, "container": "c1"},
                 "pb": {"mine": 1}}


def test_migration_is_idempotent_and_sends_unknown_keys_to_the_benchmark():
    flat = {"agent": "oracle", "task_id": "t", "answer": 42, "pb": {"a": 1}}
    once = migrate(flat, "pb")
    assert once == {"agent": {"kind": "oracle", "task_id": "t"}, "pb": {"a": 1, "answer": 42}}
    assert migrate(once, "pb") == once
    with pytest.raises(ValidationError, match="not a section"):
        RowDetails.model_validate({"answer": 42})  # no benchmark to file it under


def test_harness_schema_exports_the_sections(tmp_path):
    out = subprocess.run([sys.executable, "-m", "harness.cli", "schema", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    schema = json.loads((tmp_path / "RowDetails.schema.json").read_text())
    assert list(schema["properties"]) == ["agent", "submission", "budget", "engine", "eval",
                                          "run"]
    assert schema["additionalProperties"] == {"type": "object"}  # a benchmark's section
    budget = schema["$defs"]["BudgetDetails"]["properties"]
    assert {"charged_usd", "earlier_attempts_usd", "overrun", "settlement_error"} <= set(budget)
    row_schema = json.loads((tmp_path / "TaskRow.schema.json").read_text())
    assert row_schema["properties"]["details"] == {"$ref": "#/$defs/RowDetails"}
