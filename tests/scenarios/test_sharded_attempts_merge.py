"""Scenario (issue 41): ProgramBench's three fixture tasks, two attempts each, in two shards
on the real engine. Shard 2 is SIGKILLed after its first row; both shards are resumed with
``--attempts 3``; the shards are merged; the merged root is exported. Asserted: the shards
split by task (every attempt of a task in one shard, also after K grew), every unit of the
3 x 3 is scored once (the settled ones carried, never run again), the merge covers them all
and its figures are the official tool's (each unit's eval.json, read with the package's own
model), the official parity of each shard's attempts held, and the export of the merged
root copies every unit's submission from the shard that ran it; on the merged root,
``programbench info`` over each attempt's evals gives the ledger's scores and the gate pairs
every task on per-test keys, as on one root."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks.programbench.fixture import ensure_fixture
from benchmarks.programbench.fixture_tasks import ORACLE_SCORES
from benchmarks.programbench.kept_files import effective_rows, kept_files
from benchmarks.programbench.official_eval import per_test_outcomes, run_info
from benchmarks.programbench.parity import parse_info, percent_text
from harness.run.locate import run_roots
from harness.run.model import shard_of
from tests.scenarios.pb_scenario_support import (
    TARGET,
    ledger_rows,
    official_score,
    run_killed_after_first_row,
)
from tests.support.suite import Run, run_cli, run_pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]

OPTIONS = ("--pb-fixtures", "--agent", "oracle")
UNITS = sorted(f"{t}@{k}" for t in ORACLE_SCORES for k in (1, 2, 3))


def test_sharded_attempts_killed_resumed_to_more_attempts_merged_and_exported(
        tmp_path: Path) -> None:
    ensure_fixture()
    s1 = run_pytest(TARGET, tmp_path / "s1", *OPTIONS, "--attempts", "2", "--shard", "1/2")
    assert s1.rc == 0, s1.out
    killed = tmp_path / "s2"
    run_killed_after_first_row(killed, *OPTIONS, "--attempts", "2", "--shard", "2/2")
    grown = [run_pytest(TARGET, tmp_path / f"{r.name}-k3", "--resume-from", str(r),
                        "--agent", "oracle", "--attempts", "3") for r in (s1.root, killed)]
    for shard, run in enumerate(grown, start=1):
        assert run.rc == 0, run.out
        keys = run.manifest["selection"]["instance_ids"]
        assert {shard_of(k, 2) for k in keys} == {shard}  # split by task, K grown
        assert len(keys) == 3 * len({k.split("@")[0] for k in keys})  # every attempt
        parity = [v for k, v in run.manifest["extra"].items()
                  if k.endswith("official_parity_attempts")]
        assert all(r["ok"] for p in parity for r in p["by_attempt"].values()), parity

    chains = [[tmp_path / "s1", grown[0].root], [killed, grown[1].root]]
    for chain in chains:  # no unit scored twice along a shard's chain
        scored = [r["instance_id"] for root in chain for r in ledger_rows(root)
                  if r["outcome"] == "scored"]
        assert len(scored) == len(set(scored)), scored

    merged = tmp_path / "merged"
    proc = run_cli("merge", *(str(r.root) for r in grown), "--output", str(merged))
    assert proc.returncode == 0, proc.stderr
    assert "merged 2 shards of 2: 9 units" in proc.stdout, proc.stdout
    final = Run(0, "", merged).latest
    assert sorted(final) == UNITS
    roots = [root for chain in chains for root in chain]
    for iid, row in final.items():  # the figures are the official tool's
        official, _ = official_score({**row, "instance_id": row["sample_of"]}, roots)
        assert official == row["score"] == ORACLE_SCORES[row["sample_of"]], (iid, official)
    manifest = json.loads((merged / "run_manifest.json").read_text())
    want = sum(ORACLE_SCORES.values()) / len(ORACLE_SCORES)
    assert manifest["mean_score"] == pytest.approx(want)
    assert manifest["selection"]["count"] == 9 and manifest["extra"]["attempts"] == 3

    out = tmp_path / "export"
    done = subprocess.run([*run_cli_args(), "programbench", "export", str(merged), "--output",
                           str(out)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    exported = json.loads((out / "export_manifest.json").read_text())
    assert exported["copied"] == 9 and exported["missing_submission"] == 0, exported
    assert {Path(f["source_run"]).name for f in exported["files"]} <= {
        "s1", "s2", "s1-k3", "s2-k3"}
    check_merged_root_is_whole(merged, final, tmp_path)


def check_merged_root_is_whole(merged: Path, final: dict[str, dict], tmp_path: Path) -> None:
    """The merged root answers as one root: ``programbench info`` over each attempt's evals,
    found where the run model says they are, gives the ledger's scores, and the gate pairs
    every task on the per-test keys of its kept evals (not on ledger scores)."""
    roots = run_roots(merged)
    evals: dict[int, dict[str, Path]] = {}
    for row in effective_rows(merged):
        kept = kept_files(row, merged, roots)
        found = kept.eval_json() if kept is not None else None
        assert found is not None, (row.instance_id, kept)
        evals.setdefault(row.sample or 1, {})[row.task_id] = found
    for k, by_task in sorted(evals.items()):
        folder = tmp_path / f"official-{k}"
        for task, path in by_task.items():
            (folder / task).mkdir(parents=True)
            shutil.copyfile(path, folder / task / path.name)
        info = parse_info(run_info(folder))
        assert {t: line.percent for t, line in info.lines.items()} == {
            t: percent_text(final[f"{t}@{k}"]["score"]) for t in by_task}, (k, info)
    reference = tmp_path / "reference.score.json"
    reference.write_text(json.dumps({t: per_test_outcomes(t, p) for t, p in evals[1].items()}))
    gate = subprocess.run([*run_cli_args(), "programbench", "gate", str(merged), "--reference",
                           str(reference), "--resamples", "200", "--max-load-per-cpu", "1000"],
                          capture_output=True, text=True, check=False)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    report = json.loads((merged / "gate.json").read_text())
    assert report["verdict"] == "PASS" and report["run_scored"] == 3, report
    assert report["attempts_per_task"] == 3
    assert {p["basis"] for p in report["reference"]["pairs"]} == {"common_keys"}, report


def run_cli_args() -> list[str]:
    import sys

    return [sys.executable, "-m", "harness.cli"]
