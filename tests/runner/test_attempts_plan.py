"""Repeated attempts (``--attempts K``, issue 24), the pure parts: attempt ids, the -k
rewrite, and a resume's plan over ancestors run with the same or another K (in process)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.core.adapter import InstanceSpec
from harness.core.models import Outcome, ShardSpec, TaskRow
from harness.core.outcomes import attempt_id, split_attempt, validate_instance_id
from harness.run.plan import attempt_keyword, rewrite_attempt_keywords
from harness.run.resume import attempt_key, expand_selection, plan_resume, rekey
from tests.runner.runner_support import BENCH, CONFIG, row, write_run

pytestmark = pytest.mark.usefixtures("no_git")
VERSIONS = {BENCH: "1.0"}


def attempt_row(task: str, k: int, outcome: Outcome = Outcome.SCORED, **fields: Any) -> TaskRow:
    return row(f"{task}@{k}", outcome, sample_of=task, sample=k, **fields)


def plan(root: Path, samples: int | None):
    return plan_resume(
        root,
        config=CONFIG,
        benchmark_versions=VERSIONS,
        shard=None,
        shard_given=False,
        samples=samples,
    )


def test_attempt_ids_are_a_task_id_and_one_positive_suffix() -> None:
    assert attempt_id("a.b-c", None) == "a.b-c" and attempt_id("a.b-c", 3) == "a.b-c@3"
    assert split_attempt("a.b-c@12") == ("a.b-c", 12) and split_attempt("abc") == ("abc", None)
    for good in ("abc", "abc@1", "a_b@10"):
        assert validate_instance_id(good) == good
    for bad in ("abc@0", "abc@", "@1", "abc@1@2", "abc@01", "abc@x", "..@1", "a b@1"):
        with pytest.raises(ValueError):
            validate_instance_id(bad)
    assert (
        TaskRow(
            ts_unix=0,
            run_id="r",
            benchmark="b",
            instance_id="abc@2",
            status="s",
            outcome=Outcome.SCORED,
            sample_of="abc",
            sample=2,
        ).task_id
        == "abc"
    )


def test_an_adapter_spec_keeps_the_strict_task_id_and_the_runner_adds_the_attempt() -> None:
    with pytest.raises(ValueError):
        InstanceSpec(instance_id="abc@1")  # an adapter's id never carries an attempt
    spec = InstanceSpec(instance_id="abc", markers={"difficulty": "easy"}, data={"x": 1})
    assert spec.key_id == "abc" and spec.sample is None
    second = spec.attempt(2)
    assert (second.instance_id, second.key_id, second.sample) == ("abc", "abc@2", 2)
    assert second.data is spec.data and second.markers == spec.markers
    with pytest.raises(ValueError):
        spec.attempt(0)


def test_k_selects_an_attempt_by_its_id() -> None:
    assert rewrite_attempt_keywords("alpha@2") == attempt_keyword("alpha", 2) == "alpha:2:"
    assert rewrite_attempt_keywords("@3 and not bravo@12") == ":3: and not bravo:12:"
    assert rewrite_attempt_keywords("alpha and not beta") == "alpha and not beta"


def test_keys_across_runs_of_another_k() -> None:
    assert attempt_key(BENCH, "t", None, 1) == f"{BENCH}/t"
    assert attempt_key(BENCH, "t", None, 3) == f"{BENCH}/t@1"  # K=1's row is attempt 1
    assert attempt_key(BENCH, "t", 2, 1) is None and attempt_key(BENCH, "t", 1, 1) == f"{BENCH}/t"
    assert rekey(f"{BENCH}/t@3", 2) is None and rekey(f"{BENCH}/t@2", 2) == f"{BENCH}/t@2"
    assert expand_selection([f"{BENCH}/a", f"{BENCH}/b"], 2) == [
        f"{BENCH}/a@1",
        f"{BENCH}/b@1",
        f"{BENCH}/a@2",
        f"{BENCH}/b@2",
    ]
    assert expand_selection([f"{BENCH}/a@1", f"{BENCH}/a@2", f"{BENCH}/a@3"], 1) == [f"{BENCH}/a"]


def test_a_resume_keeps_k_and_runs_only_the_unsettled_attempts(tmp_path: Path) -> None:
    ids = [f"{t}@{k}" for k in (1, 2, 3) for t in ("a", "b")]
    rows = [
        attempt_row("a", 1),
        attempt_row("b", 1),
        attempt_row("a", 2),
        attempt_row("b", 2, Outcome.INFRA_FAILED, infra=True),  # cut short
        attempt_row("a", 3, Outcome.AGENT_FAILED),
    ]  # b@3 never ran
    root = write_run(tmp_path / "r1", run_id="r1", selection=ids, rows=rows, extra={"attempts": 3})
    rp = plan(root, None)
    assert rp.samples == rp.ancestor_samples == 3 and not rp.grew_samples
    assert rp.selection == [f"{BENCH}/{i}" for i in ids]
    assert sorted(rp.carried) == sorted(f"{BENCH}/{i}" for i in ("a@1", "b@1", "a@2", "a@3"))
    assert rp.attempts == {f"{BENCH}/b@2": 2}
    assert rp.carried[f"{BENCH}/a@3"].sample == 3


def test_a_resume_with_more_attempts_adds_only_the_new_ones(tmp_path: Path) -> None:
    """K=1 -> K=3: the K=1 row is attempt 1 (carried as ``a@1``); only @2 and @3 run."""
    root = write_run(
        tmp_path / "r1",
        run_id="r1",
        selection=["a", "b"],
        rows=[row("a"), row("b", Outcome.INFRA_FAILED, infra=True)],
    )
    rp = plan(root, 3)
    assert rp.grew_samples and rp.ancestor_samples == 1
    assert rp.selection == [f"{BENCH}/{t}@{k}" for k in (1, 2, 3) for t in ("a", "b")]
    carried = rp.carried[f"{BENCH}/a@1"]
    assert (carried.instance_id, carried.sample_of, carried.sample) == ("a@1", "a", 1)
    assert carried.carried_from == "r" and carried.score == 1.0  # the row's own run id
    assert list(rp.carried) == [f"{BENCH}/a@1"]
    assert rp.attempts == {f"{BENCH}/b@1": 2}  # b's first attempt runs again

    # ... and back to one attempt: attempt 1 of each task is the run's row again.
    two = write_run(
        tmp_path / "r2",
        run_id="r2",
        selection=["a@1", "a@2"],
        rows=[attempt_row("a", 1), attempt_row("a", 2, Outcome.AGENT_FAILED)],
        extra={"attempts": 2},
    )
    rp = plan(two, 1)
    assert rp.selection == [f"{BENCH}/a"] and not rp.grew_samples
    only = rp.carried[f"{BENCH}/a"]
    assert (only.instance_id, only.sample_of, only.sample) == ("a", None, None)


def test_a_k1_resume_plans_exactly_as_before(tmp_path: Path) -> None:
    rows = [row("a"), row("b", Outcome.INFRA_FAILED, infra=True), row("c", attempt=2)]
    root = write_run(tmp_path / "r1", run_id="r1", selection=["a", "b", "c"], rows=rows)
    rp = plan(root, None)
    assert rp.samples == 1 and rp.selection == [f"{BENCH}/{i}" for i in ("a", "b", "c")]
    assert rp.carried[f"{BENCH}/a"].instance_id == "a"
    assert rp.carried[f"{BENCH}/a"].sample is None
    assert rp.attempts == {f"{BENCH}/b": 2}


def test_merged_shards_keep_k_and_sum_their_retries(tmp_path: Path) -> None:
    from harness.run.merge import MergeError, merge

    extra = {
        "attempts": 2,
        "infra_retries": {"limit": 1, "retries": 1, "by_reason": {"docker_unavailable": 1}},
    }
    shards = [
        write_run(
            tmp_path / f"s{i}",
            run_id=f"s{i}",
            selection=[f"t{i}@1", f"t{i}@2"],
            rows=[attempt_row(f"t{i}", 1), attempt_row(f"t{i}", 2)],
            shard=ShardSpec(index=i, count=2),
            extra=extra,
        )
        for i in (1, 2)
    ]
    record = merge(shards, tmp_path / "merged")
    assert record.selected == 4 and record.rows == 4
    merged = json.loads((tmp_path / "merged" / "run_manifest.json").read_text())
    assert merged["extra"]["attempts"] == 2
    assert merged["extra"]["infra_retries"] == {
        "limit": 1,
        "retries": 2,
        "by_reason": {"docker_unavailable": 2},
    }
    other = write_run(
        tmp_path / "k3",
        run_id="k3",
        selection=["t2@1"],
        rows=[],
        shard=ShardSpec(index=2, count=2),
        extra={"attempts": 3},
    )
    with pytest.raises(MergeError, match=r"different --attempts \(2, 3\)"):
        merge([shards[0], other], tmp_path / "bad")
