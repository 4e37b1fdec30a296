"""The run model (issue 41): tasks, K attempts, units and shards said once."""

from __future__ import annotations

from harness.core.models import ShardSpec
from harness.run.model import RunModel, in_shard, shard_of, task_key, unit_key

TASKS = [f"programbench/task-{i:03d}" for i in range(200)]


def test_units_are_tasks_times_attempts() -> None:
    model = RunModel.of_keys(TASKS[:3], attempts=2)
    assert model.units == ["programbench/task-000@1", "programbench/task-001@1",
                           "programbench/task-002@1", "programbench/task-000@2",
                           "programbench/task-001@2", "programbench/task-002@2"]
    assert RunModel.of_keys(model.units, attempts=2) == model  # the units name their tasks
    assert RunModel.of_keys(TASKS[:2]).units == TASKS[:2]  # K=1: the task's own key
    assert task_key("programbench/task-001@7") == "programbench/task-001"
    assert unit_key("programbench/task-001", 1, 1) == "programbench/task-001"


def test_a_shard_holds_every_attempt_of_its_tasks() -> None:
    for count in (2, 3, 8):
        for task in TASKS[:40]:
            shards = {shard_of(unit_key(task, k, 5), count) for k in range(1, 6)}
            assert shards == {shard_of(task, count)}
    spec = ShardSpec(index=1, count=2)
    assert in_shard("b/x@3", spec) == in_shard("b/x", spec)


def test_the_notice_counts_tasks_never_attempts() -> None:
    sizes = {"programbench": 200}
    assert RunModel.of_keys(TASKS, attempts=2).notice(sizes) is None  # the whole benchmark
    assert RunModel.of_keys(TASKS[:100], attempts=2).notice(sizes) == (
        "100 of 200 tasks, 2 attempts each: not the benchmark score")
    assert RunModel.of_keys(TASKS[:50]).notice(sizes) == "50 of 200 tasks: not the benchmark score"
    both = RunModel.of_keys([*TASKS[:5], "cowork/t-1"], attempts=3)
    assert both.notice({"programbench": 200, "cowork": 496}) == (
        "1 of 496 tasks, 5 of 200 tasks, 3 attempts each: not the benchmark score")


def test_missing_units_are_named() -> None:
    model = RunModel.of_keys(TASKS[:2], attempts=2)
    have = {k: None for k in model.units[:3]}
    assert model.missing(have) == ["programbench/task-001@2"]  # type: ignore[arg-type]


def test_two_benchmarks_have_a_mean_each_and_none_across() -> None:
    from harness.core.models import Outcome, TaskRow
    from harness.run.ledger import tally

    def row(key: str, score: float) -> TaskRow:
        bench, iid = key.split("/")
        return TaskRow(ts_unix=1.0, run_id="r", benchmark=bench, instance_id=iid,
                       status="completed", outcome=Outcome.SCORED, attempt=1, score=score)

    keys = ["programbench/a", "programbench/b", "cowork_bench/c"]
    figures = tally(keys, {k: row(k, s) for k, s in zip(keys, (0.5, 0.25, 1.0), strict=True)})
    assert figures.mean_score is None  # a partial score and a pass/fail do not average
    assert figures.by_benchmark == {"cowork_bench": 1.0, "programbench": 0.375}
    assert tally(keys[:2], {}).mean_score == 0.0  # one benchmark: its mean, missing count 0
