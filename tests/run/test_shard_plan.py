"""``harness shard-plan``: the fewest shards whose largest fits the job, from a collection."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from harness.run.manifest import new_manifest, write_manifest
from harness.run.model import shard_of
from harness.run.shard_plan import ShardPlanError, capacity, plan, unit_keys

KEYS = [f"programbench/org__task{i}.abc@{k}" for i in range(60) for k in (1, 2)]


def test_the_plan_is_the_fewest_shards_whose_largest_fits() -> None:
    cap = capacity(workers=4, task_minutes=60, job_minutes=350, setup_minutes=20,
                   eval_minutes=15)
    assert cap == 16  # 4 rounds of 75 min in 330, 4 workers each
    found = plan(KEYS, cap)
    sizes = Counter(shard_of(k, found.count) for k in KEYS)
    assert max(sizes.values()) == found.largest <= cap
    fewer = Counter(shard_of(k, found.count - 1) for k in KEYS)
    assert max(fewer.values()) > cap  # one shard fewer would outlive the job


def test_the_units_are_the_run_models_and_a_tasks_attempts_stay_together(
        tmp_path: Path) -> None:
    """The plan reads the units a dry run froze (its manifest's selection and K), as every
    shard will select them; a task's K attempts cannot be split."""
    manifest = new_manifest(run_id="plan", run_root=tmp_path, argv=[], dry_run=True, workers=1)
    manifest.selection.instance_ids = ["programbench/org__a.b@1", "programbench/org__a.b@2"]
    manifest.extra.attempts = 2
    write_manifest(manifest, tmp_path)
    keys = unit_keys(tmp_path)
    assert sorted(keys) == ["programbench/org__a.b@1", "programbench/org__a.b@2"]
    assert plan(keys, 2).count == 1
    with pytest.raises(ShardPlanError, match="attempts alone exceed 1"):
        plan(keys, 1)  # two attempts of one task cannot be split
    with pytest.raises(ShardPlanError, match="--run"):
        unit_keys(tmp_path / "no-such-run")


def test_what_cannot_fit_is_refused() -> None:
    with pytest.raises(ShardPlanError, match="does not fit a job of 350 min"):
        capacity(workers=4, task_minutes=400, job_minutes=350, setup_minutes=20,
                 eval_minutes=15)
    with pytest.raises(ShardPlanError, match="holds no instance"):
        plan([], 16)
