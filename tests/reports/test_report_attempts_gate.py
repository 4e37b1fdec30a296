"""``harness programbench gate`` on a run with repeated attempts: paired by task, each task's
run score the mean over its attempts, an unscored attempt refuses the gate; a K=1 gate
record keeps its shape. Synthetic ledgers, the real leaderboard score files."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks.programbench.gate import GateRefused, GateReport, render, run_gate
from benchmarks.programbench.scores import load_scores
from reports.stats import bootstrap_mean_ci
from tests.reports.attempt_runs import INFRA, attempt_id, attempt_row, attempt_rows
from tests.reports.report_runs import row

MakeRun = Callable[..., Path]
LEADERBOARD = Path(__file__).resolve().parents[1] / "data" / "programbench_leaderboard"
OPUS = LEADERBOARD / "20260429_mini-v2.2.6_opus-4-7-xhigh.score.json"
TWO_SOLVE = LEADERBOARD / "20260702_dtl-supermath-2solve-cleanroom-v6.score.json"
WALK = "antonmedv__walk.bf802ef"
B = "programbench"


def _tasks(n: int) -> list[str]:
    return sorted(load_scores(OPUS).scores)[:n]


def test_gate_pairs_by_task_with_the_mean_over_attempts(make_run: MakeRun) -> None:
    opus = load_scores(OPUS).scores
    tasks = _tasks(5)
    runs = {t: [min(1.0, opus[t] + d) for d in (-0.2, 0.0, 0.1)] for t in tasks}
    root = make_run("k3", attempt_rows(runs))
    report = run_gate(root, OPUS, resamples=2000, seed=3)
    ref = report.reference
    assert ref.n_pairs == 5 and [p.instance_id for p in ref.pairs] == tasks
    for p in ref.pairs:
        assert p.run == pytest.approx(sum(runs[p.instance_id]) / 3)
        assert p.reference == opus[p.instance_id] and p.basis == "instance_score"
        assert p.attempts == [attempt_id(p.instance_id, k) for k in (1, 2, 3)]
        assert p.attempt_scores == pytest.approx(runs[p.instance_id])
    diffs = [p.diff for p in ref.pairs]
    ci = bootstrap_mean_ci(diffs, resamples=2000, seed=3)
    assert ci is not None and (ref.ci_low, ref.ci_high) == (
        pytest.approx(ci[0]),
        pytest.approx(ci[1]),
    )
    assert report.run_scored == 5 and report.attempts_per_task == 3
    assert report.attempts_scored == 15
    assert "run tasks scored: 5 with 15 attempts (up to 3 per task" in render(report)
    data = json.loads(report.model_dump_json(by_alias=True))
    assert data["attempts_per_task"] == 3 and "attempts" in data["reference"]["pairs"][0]


def test_gate_refuses_while_an_attempt_is_unscored(make_run: MakeRun) -> None:
    tasks = _tasks(3)
    rows = attempt_rows({t: [0.5, 0.5] for t in tasks})
    rows.append(attempt_row(B, tasks[0], 3, **INFRA))
    selection = [r.key for r in rows] + [f"{B}/{tasks[1]}@3"]  # selected, never written
    root = make_run("k3", rows, selection)
    with pytest.raises(GateRefused) as refused:
        run_gate(root, OPUS, resamples=200)
    message = str(refused.value)
    assert message.startswith("2 gate task(s) unscored")
    assert f"{tasks[0]} ({attempt_id(tasks[0], 3)} (infra_failed))" in message
    assert f"{tasks[1]} ({tasks[1]}@3 (no row))" in message
    assert tasks[2] not in message


def _eval_json(keys: list[str], passed: list[str]) -> str:
    results: list[dict[str, object]] = [
        {
            "name": key.split("/", 1)[1],
            "branch": key.split("/", 1)[0],
            "status": "passed" if key in passed else "failure",
            "extra": {},
        }
        for key in keys
    ]
    return json.dumps({"test_results": results})


def test_gate_reduces_each_attempt_on_its_own_eval_json(make_run: MakeRun) -> None:
    two = json.loads(TWO_SOLVE.read_text())
    keys = sorted(two[WALK])
    rows = attempt_rows({WALK: [0.4, 0.6]})
    root = make_run("k2", rows, files=False)
    passed = {1: keys[: len(keys) // 2], 2: keys}  # attempt 2 passes every reference key
    for k, ok in passed.items():
        folder = root / B / attempt_id(WALK, k)
        folder.mkdir(parents=True)
        (folder / f"{WALK}.eval.json").write_text(_eval_json(keys, ok))
    report = run_gate(root, TWO_SOLVE, resamples=200)
    [pair] = report.reference.pairs
    assert pair.basis == "common_keys" and pair.n_keys == len(keys)
    first = len(passed[1]) / len(keys)
    assert pair.attempt_scores == pytest.approx([first, 1.0])
    assert pair.run == pytest.approx((first + 1.0) / 2) and pair.reference == 1.0


def test_gate_reads_the_eval_json_the_runner_kept_never_through_a_link(
    make_run: MakeRun, tmp_path: Path
) -> None:
    """An attempt's eval.json is where the runner's eval wrote it (the row's ``output_paths``:
    ``<attempt>/official_eval/<task>/<task>.eval.json``). A link in its place (to a file
    outside the run, passing every test) is not followed: that attempt pairs on its score."""
    two = json.loads(TWO_SOLVE.read_text())
    keys = sorted(two[WALK])
    half = keys[: len(keys) // 2]
    rel = {k: f"{B}/{attempt_id(WALK, k)}/official_eval/{WALK}/{WALK}.eval.json" for k in (1, 2)}
    rows = [
        attempt_row(B, WALK, k, score=0.4, resolved=False, output_paths={"eval_json": rel[k]})
        for k in (1, 2)
    ]
    root = make_run("k2", rows, files=False)
    outside = tmp_path / "forged.eval.json"
    outside.write_text(_eval_json(keys, keys))
    for k in (1, 2):
        (root / rel[k]).parent.mkdir(parents=True)
    (root / rel[1]).write_text(_eval_json(keys, half))
    (root / rel[2]).symlink_to(outside)
    report = run_gate(root, TWO_SOLVE, resamples=200)
    [pair] = report.reference.pairs
    assert pair.basis == "mixed"
    assert pair.attempt_scores == pytest.approx([len(half) / len(keys), 0.4])


def test_k1_gate_record_keeps_its_shape(make_run: MakeRun) -> None:
    opus = load_scores(OPUS).scores
    root = make_run("k1", [row(f"{B}/{t}", score=opus[t]) for t in _tasks(4)])
    report = run_gate(root, OPUS, resamples=200)
    data = json.loads(report.model_dump_json(by_alias=True))
    assert not {"attempts_per_task", "attempts_scored"} & set(data)
    assert all(not {"attempts", "attempt_scores"} & set(p) for p in data["reference"]["pairs"])
    assert "run instances scored: 4, not scored: 0" in render(report)
    assert GateReport.model_validate(data).verdict == "PASS"
