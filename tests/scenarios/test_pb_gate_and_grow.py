"""Scenario (issue 23): ProgramBench gate-and-grow on the real engine.

A gate list (``--task-file``) of two offline fixture tasks is run with the oracle agent and
SIGKILLed as soon as the first task's row is written (the second is under way). Then:

* the resume runs only what the kill left unsettled (the settled task is carried, no second
  agent run or eval for it), and its parity check leaves the carried score alone;
* a second resume grows the run to every fixture task (``--all-instances``): the two settled
  tasks are carried, the third (solved / partial / failed: three outcomes) runs;
* ``harness programbench gate`` passes the grown run against a reference of the official
  scores; ``harness programbench export`` copies every final submission, carried ones from
  the ancestor that scored them, and the real ``programbench eval`` of that export gives the
  ledger's scores again.

Asserted at every step: nothing lost (every selected task has a final settled row), nothing
run twice, no carried score rewritten, no infrastructure row from a resume, every final score
equal to the official tool's (the eval.json ``programbench eval`` wrote, read by the package's
model, and ``programbench info``'s table); at the end no container of any of the runs is left.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.fixture import ensure_fixture
from benchmarks.programbench.fixture_tasks import ORACLE_SCORES
from benchmarks.programbench.official_eval import evaluate_batch, run_info
from benchmarks.programbench.parity import parse_info, percent_text
from tests.scenarios.pb_scenario_support import (
    TARGET,
    labelled_containers,
    ledger_rows,
    official_score,
    run_killed_after_first_row,
)
from tests.support.suite import Run, run_pytest

# slow tier: a minute or more each on this engine (CI runs it after the default tier)
pytestmark = [pytest.mark.docker, pytest.mark.slow]

GATE = [FIXTURE_ID, "testorg__calcfloat.bcd2345"]
AGENT = ("--agent", "oracle")


def _harness(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("harness")
    assert exe, "the harness console script is installed by `pip install -e .`"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=900,
                          check=False)


def _worked_on(root: Path, iid: str) -> list[str]:
    """What an agent run or eval left in ``root`` for ``iid`` (the instance folder's copy of
    its ledger rows is the controller's, whatever happened)."""
    folder = root / "programbench" / iid
    return sorted(p.name for p in folder.iterdir() if p.name != "result_index.jsonl") \
        if folder.is_dir() else []


def _no_infra(run: Run) -> None:
    bad = [(r["instance_id"], r["reason_code"]) for r in ledger_rows(run.root)
           if r["outcome"] == "infra_failed" or r["infra"]]
    assert bad == [], f"infrastructure rows from {run.root}: {bad}\n{run.out}"


def _carried_untouched(run: Run, parents: dict[str, dict[str, object]]) -> None:
    """Every carried row keeps its ancestor's verdict, and nothing supersedes it."""
    for iid, old in parents.items():
        rows = [r for r in ledger_rows(run.root) if r["instance_id"] == iid]
        assert len(rows) == 1, f"{iid}: {len(rows)} rows in {run.root} (rewritten?)"
        [row] = rows
        assert row["outcome"] == "carried_forward", row
        for field in ("score", "resolved", "official_eval_status", "tests_passed"):
            assert row[field] == old[field], (iid, field, row[field], old[field])
        assert _worked_on(run.root, iid) == []  # no agent run, no eval for it


def test_pb_gate_kill_resume_grow_gate_export(tmp_path: Path) -> None:
    fixture = ensure_fixture()  # builds once; installs the fixture tasks the run lists
    assert sorted(ORACLE_SCORES) == sorted(fixture.task_ids) and len(ORACLE_SCORES) == 3
    gate_list = tmp_path / "gate.txt"
    gate_list.write_text("# Gate list: two fixture tasks\n" + "\n".join(GATE) + "\n")

    # 1. The gate run, SIGKILLed once its first task has settled.
    r1 = tmp_path / "r1"
    settled_before_kill = run_killed_after_first_row(
        r1, "--pb-fixtures", "--task-file", str(gate_list), *AGENT)
    assert len(settled_before_kill) == 1, settled_before_kill  # killed mid-run
    [first] = settled_before_kill
    killed = next(i for i in GATE if i != first)
    first_row = Run(0, "", r1).latest[first]
    assert first_row["official_eval_status"] == "completed"
    assert first_row["score"] == ORACLE_SCORES[first]

    # 2. The resume: only the killed task runs; the settled one is carried, not re-run.
    r2 = run_pytest(TARGET, tmp_path / "r2", "--resume-from", str(r1), *AGENT)
    assert r2.rc == 0, r2.out
    assert sorted(r2.latest) == sorted(GATE)
    assert r2.manifest["resume"]["carried"] == 1 and r2.manifest["resume"]["to_run"] == 1
    _carried_untouched(r2, {first: first_row})
    _no_infra(r2)
    assert r2.latest[killed]["outcome"] == "scored"
    parity = r2.manifest["extra"]["official_parity"]
    assert parity["ok"] and parity["carried"] == 1 and parity["checked"] == 1, parity

    # 3. Grow to every fixture task by a resume: two carried, one new.
    r3 = run_pytest(TARGET, tmp_path / "r3", "--resume-from", str(r2.root),
                    "--all-instances", *AGENT)
    assert r3.rc == 0, r3.out
    assert sorted(r3.latest) == sorted(ORACLE_SCORES)
    assert r3.manifest["selection"]["count"] == 3
    assert r3.manifest["resume"]["carried"] == 2 and r3.manifest["resume"]["to_run"] == 1
    _carried_untouched(r3, {first: first_row, killed: r2.latest[killed]})
    _no_infra(r3)
    parity = r3.manifest["extra"]["official_parity"]
    assert parity["ok"] and parity["carried"] == 2 and parity["checked"] == 1, parity

    # Nothing lost, nothing run twice, every final score the official tool's.
    roots = [r1, r2.root, r3.root]
    final = r3.latest
    official = tmp_path / "official"  # every final eval.json, where programbench info reads
    for iid, want in ORACLE_SCORES.items():
        row = final[iid]
        assert row["score"] == want, (iid, row)
        assert row["official_eval_status"] == "completed"
        score, path = official_score(row, roots)
        assert score == row["score"], (iid, score, row["score"])
        (official / iid).mkdir(parents=True)
        shutil.copyfile(path, official / iid / path.name)
        scored_in = [r for root in roots for r in ledger_rows(root)
                     if r["instance_id"] == iid and r["outcome"] != "carried_forward"]
        assert len(scored_in) == 1, (iid, scored_in)  # one agent run + eval that settled
    assert _worked_on(r2.root, first) == _worked_on(r3.root, first) == []
    assert _worked_on(r3.root, killed) == []
    info = parse_info(run_info(official))
    assert {iid: line.percent for iid, line in info.lines.items()} == {
        iid: percent_text(final[iid]["score"]) for iid in ORACLE_SCORES}
    mean = sum(ORACLE_SCORES.values()) / len(ORACLE_SCORES)
    assert info.average_percent == f"{mean * 100:.0f}" and info.instances == 3
    assert abs(r3.manifest["mean_score"] - mean) < 1e-9

    # 4. The gate: the grown run against a reference of the official scores.
    reference = tmp_path / "reference.score.json"
    reference.write_text(json.dumps({iid: final[iid]["score"] for iid in ORACLE_SCORES}))
    gate = _harness("programbench", "gate", str(r3.root), "--reference", str(reference),
                    "--resamples", "200", "--max-load-per-cpu", "1000")
    assert gate.returncode == 0, gate.stdout + gate.stderr
    report = json.loads((r3.root / "gate.json").read_text())
    assert report["verdict"] == "PASS" and report["run_scored"] == 3 and report["unscored"] == []
    assert report["reference"]["n_pairs"] == 3 and report["reference"]["mean_diff"] == 0

    # 5. Export: every final submission, the carried ones from the run that scored them.
    export = tmp_path / "export"
    out = _harness("programbench", "export", str(r3.root), "--output", str(export))
    assert out.returncode == 0, out.stdout + out.stderr
    manifest = json.loads((export / "export_manifest.json").read_text())
    assert manifest["copied"] == 3 and manifest["missing_ids"] == [], manifest
    sources = {f["instance_id"]: f["source_run"] for f in manifest["files"]}
    assert sources == {first: str(r1.resolve()), killed: str(r2.root.resolve()),
                       next(i for i in ORACLE_SCORES if i not in GATE): None}
    for f in manifest["files"]:
        assert f["sha256"] == final[f["instance_id"]]["details"]["submission"]["sha256"]
    # The real programbench eval of the export scores what the ledger says.
    results = evaluate_batch(export, blob_dir=fixture.blob_dir)
    assert {iid: r.score for iid, r in results.items()} == {
        iid: final[iid]["score"] for iid in ORACLE_SCORES}
    # The killed run's sandbox was swept by the resume; no run left a container behind.
    assert [name for root in roots for name in labelled_containers(root)] == []
