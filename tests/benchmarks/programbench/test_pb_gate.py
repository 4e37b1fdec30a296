"""Leaderboard score files and the paired gate, on the real registry files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.programbench.gate import GateReport, gate_command, run_gate
from benchmarks.programbench.scores import load_scores, read_run_scores

LEADERBOARD = Path(__file__).resolve().parents[2] / "data" / "programbench_leaderboard"
OPUS = LEADERBOARD / "20260429_mini-v2.2.6_opus-4-7-xhigh.score.json"
TWO_SOLVE = LEADERBOARD / "20260702_dtl-supermath-2solve-cleanroom-v6.score.json"
WALK = "antonmedv__walk.bf802ef"


ROW_DEFAULTS = {"benchmark": "programbench", "ts_unix": 1.0, "run_id": "run"}
OUTCOMES = {"completed": "scored", "failed": "agent_failed", "infra_failed": "infra_failed"}


def _ledger(run: Path, rows: list[dict[str, object]], tail: str = "") -> Path:
    run.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps({**ROW_DEFAULTS, "outcome": OUTCOMES.get(str(r.get("status")), "scored"),
                               **r}) + "\n" for r in rows) + tail
    (run / "result_index.jsonl").write_text(text)
    return run


def _rows(scores: dict[str, float], shift: float = 0.0) -> list[dict[str, object]]:
    return [
        {"instance_id": i, "status": "completed", "score": min(1.0, max(0.0, s + shift))}
        for i, s in scores.items()
    ]


def test_real_leaderboard_headlines() -> None:
    opus = load_scores(OPUS)
    head = opus.headline()
    assert opus.format == "per_instance" and head.instances == 199
    assert round(head.mean_over_200, 3) == 0.547
    assert head.near_resolved == 9 and head.near_resolved_pct == 4.5 and head.resolved == 0
    two = load_scores(TWO_SOLVE)
    assert two.format == "per_test"
    assert two.scores == {WALK: 1.0, "cweill__gotests.2a672c5": 1.0}
    assert two.headline().resolved == 2


def test_bad_scores_files_are_refused(tmp_path: Path) -> None:
    for body in ('["a"]', '{"a": "x"}', '{"a": 1.5}', '{"a": 0.5, "b": {"k": true}}', "{"):
        path = tmp_path / "s.json"
        path.write_text(body)
        with pytest.raises(ValueError):
            load_scores(path)


def test_ledger_reading_last_row_wins_torn_tail_and_unscored(tmp_path: Path) -> None:
    run = _ledger(
        tmp_path / "run",
        [
            {
                "instance_id": "a",
                "status": "infra_failed",
                "outcome": "infra_failed",
                "score": None,
            },
            {"instance_id": "a", "status": "completed", "outcome": "scored", "score": 0.5},
            {"instance_id": "b", "status": "failed", "outcome": "agent_failed", "score": None},
            {
                "instance_id": "c",
                "status": "infra_failed",
                "outcome": "infra_failed",
                "score": None,
            },
            {"instance_id": "d", "status": "completed", "score": 1.0, "benchmark": "cowork_bench"},
        ],
        tail='{"instance_id": "a", "sco',
    )
    scored, unscored = read_run_scores(run / "result_index.jsonl")
    assert {k: v.score for k, v in scored.items()} == {"a": 0.5, "b": 0.0}
    assert [u.instance_id for u in unscored] == ["c"]
    (run / "result_index.jsonl").write_text(
        '{"instance_id": "a"\n{"instance_id": "b", "score": 1}\n'
    )
    with pytest.raises(ValueError, match="line 1 is corrupt"):
        read_run_scores(run / "result_index.jsonl")


def test_gate_passes_when_equal_and_fails_when_worse(tmp_path: Path) -> None:
    opus = load_scores(OPUS).scores
    first20 = dict(sorted(opus.items())[:20])
    same = run_gate(_ledger(tmp_path / "same", _rows(first20)), OPUS)
    assert same.verdict == "PASS" and same.reference.n_pairs == 20
    assert same.reference.mean_diff == 0 and same.reference.ci_low == same.reference.ci_high == 0
    worse = run_gate(
        _ledger(tmp_path / "worse", _rows(first20, -0.05)), OPUS, seed=1, resamples=2000
    )
    assert worse.verdict == "FAIL" and worse.reasons
    ref = worse.reference
    assert ref.run_mean is not None and ref.other_mean is not None and ref.run_mean < ref.other_mean
    assert (
        ref.ci_low is not None
        and ref.ci_high is not None
        and ref.mean_diff is not None
        and ref.ci_low <= ref.mean_diff <= ref.ci_high < 0
    )
    again = run_gate(tmp_path / "worse", OPUS, seed=1, resamples=2000)
    assert (again.reference.ci_low, again.reference.ci_high) == (ref.ci_low, ref.ci_high)
    assert [p.instance_id for p in ref.pairs] == sorted(first20)


def test_baseline_on_its_own_shared_subset(tmp_path: Path) -> None:
    opus = load_scores(OPUS).scores
    run_scores = {
        WALK: 0.9,
        "cweill__gotests.2a672c5": 0.95,
        "abishekvashok__cmatrix.5c082c6": 0.97,
    }
    run = _ledger(tmp_path / "run", _rows(run_scores))
    report = run_gate(run, OPUS, TWO_SOLVE)
    # Beats Opus on the three shared instances, but the baseline solved its two.
    assert report.reference.passed and report.reference.n_pairs == 3
    assert (
        report.baseline is not None and report.baseline.n_pairs == 2 and not report.baseline.passed
    )
    assert report.baseline.only_in_run == ["abishekvashok__cmatrix.5c082c6"]
    assert report.verdict == "FAIL"
    assert all(opus[p.instance_id] == p.reference for p in report.reference.pairs)


def test_per_test_reference_pairs_on_common_keys_with_the_runs_eval_json(tmp_path: Path) -> None:
    two = json.loads(TWO_SOLVE.read_text())
    keys = sorted(two[WALK])
    half = keys[: len(keys) // 2]
    results = [
        {
            "name": k.split("/", 1)[1],
            "branch": k.split("/", 1)[0],
            "status": "passed" if k in half else "failure",
            "extra": {},
        }
        for k in keys[: len(keys) - 10]  # the run lacks 10 of the reference's keys
    ]
    folder = tmp_path / "run" / "programbench" / WALK
    folder.mkdir(parents=True)
    (folder / f"{WALK}.eval.json").write_text(json.dumps({"test_results": results}))
    run = _ledger(tmp_path / "run", [{"instance_id": WALK, "status": "completed", "score": 0.4}])
    report = run_gate(run, TWO_SOLVE)
    [pair] = report.reference.pairs
    assert pair.basis == "common_keys" and pair.n_keys == len(keys) - 10
    assert pair.reference == 1.0 and pair.run == pytest.approx(len(half) / (len(keys) - 10))


def test_gate_command_writes_once_and_exit_codes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    opus = load_scores(OPUS).scores
    run = _ledger(tmp_path / "run", _rows(dict(sorted(opus.items())[:5]), +0.01))
    assert gate_command([str(run), "--reference", str(OPUS), "--resamples", "500"]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "5 pairs" in out
    report = GateReport.model_validate_json((run / "gate.json").read_text())
    assert report.verdict == "PASS" and len(report.reference.pairs) == 5
    assert gate_command([str(run), "--reference", str(OPUS)]) == 2  # never overwritten
    assert "never overwritten" in capsys.readouterr().err
    other = tmp_path / "gate2.json"
    assert gate_command([str(run), "--reference", str(TWO_SOLVE), "--output", str(other)]) == 1
    assert "no instance is shared" in capsys.readouterr().out
    assert (
        gate_command(
            [
                str(tmp_path / "nowhere"),
                "--reference",
                str(OPUS),
                "--output",
                str(tmp_path / "g3.json"),
            ]
        )
        == 2
    )
    assert gate_command(["--bogus"]) == 2


HYPERFINE = "sharkdp__hyperfine.327d5f4"  # the one task the Opus entry lacks


def _gate20(tmp_path: Path) -> tuple[Path, list[str]]:
    """A Gate-20 task list: 10 smoke + 10 unseen (one of them missing from Opus)."""
    opus = sorted(load_scores(OPUS).scores)
    smoke, unseen = opus[:10], [*opus[10:19], HYPERFINE]
    path = tmp_path / "gate20.json"
    path.write_text(json.dumps({"smoke": smoke, "unseen": unseen}))
    return path, smoke + unseen


def test_gate_refuses_while_a_listed_task_is_unscored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks, ids = _gate20(tmp_path)
    rows = _rows(dict.fromkeys(ids[:18], 0.5))
    rows.append({"instance_id": ids[18], "status": "infra_failed", "score": None})
    run = _ledger(tmp_path / "run", rows)  # ids[19] has no row at all
    argv = [str(run), "--reference", str(OPUS), "--tasks", str(tasks), "--resamples", "200"]
    assert gate_command(argv) == 2
    err = capsys.readouterr().err
    assert ids[18] in err and ids[19] in err and "unscored" in err
    assert not (run / "gate.json").exists()


def test_gate_pairs_over_every_listed_task(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks, ids = _gate20(tmp_path)
    opus = load_scores(OPUS).scores
    run = _ledger(tmp_path / "run", _rows(dict.fromkeys(ids, 0.6)))
    argv = [str(run), "--reference", str(OPUS), "--tasks", str(tasks), "--resamples", "200",
            "--max-load-per-cpu", "0"]  # any load is "overloaded": the warning must show
    code = gate_command(argv)
    out = capsys.readouterr()
    report = GateReport.model_validate_json((run / "gate.json").read_text())
    assert report.tasks is not None
    assert report.tasks.smoke == ids[:10] and report.tasks.unseen == ids[10:]
    assert report.reference.n_pairs == 20  # every listed task, none dropped
    missing = next(p for p in report.reference.pairs if p.instance_id == HYPERFINE)
    assert missing.reference == 0.0 and missing.reference_missing
    expected = sum(opus.get(i, 0.0) for i in ids) / 20
    assert report.reference.other_mean == pytest.approx(expected)
    assert report.reference.run_mean == pytest.approx(0.6)
    assert code == (0 if expected <= 0.6 else 1)
    load = report.host_load
    assert len(load.start) == 3 and len(load.end) == 3 and load.cpus >= 1
    assert load.overloaded and "overloaded" in out.err


def test_gate_task_list_must_be_ten_smoke_and_ten_unseen(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _ledger(tmp_path / "run", _rows({WALK: 1.0}))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"smoke": [WALK], "unseen": []}))
    assert gate_command([str(run), "--reference", str(OPUS), "--tasks", str(bad)]) == 2
    assert "10 smoke" in capsys.readouterr().err
