"""Shards (harness.run.plan): every instance is in exactly one shard of an I/N split, the
same one on every machine and in every process, and a shard keeps the collection's order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.models import Plan, ShardSpec
from harness.run.plan import PlanError, in_shard, parse_shard, select_keys, shard_of

pytestmark = pytest.mark.usefixtures("no_git")

REPO = Path(__file__).resolve().parents[2]
KEYS = [f"programbench/task-{i}" for i in range(500)] + \
    [f"cowork/{c}" for c in ("alpha", "Beta", "g.1", "d_2", "e-3")]


def plan(shard: ShardSpec | None, selection: list[str] | None = None) -> Plan:
    return Plan(run_id="r", created_at_unix=0.0, shard=shard, selection=selection)


@pytest.mark.parametrize("count", [1, 2, 3, 7, 16])
def test_the_shards_of_a_split_are_disjoint_and_cover_everything(count: int) -> None:
    specs = [ShardSpec(index=i, count=count) for i in range(1, count + 1)]
    shards = [select_keys(KEYS, plan(spec)) for spec in specs]
    assert sorted(k for s in shards for k in s) == sorted(KEYS)  # covering, none twice
    for s in shards:
        members = set(s)
        assert s == [k for k in KEYS if k in members]  # each in the collection's order
    for key in KEYS:
        assert [spec.index for spec in specs if in_shard(key, spec)] == [shard_of(key, count)]


def test_membership_does_not_depend_on_the_process(tmp_path: Path) -> None:
    """Shards run on different machines: a hash randomized per process (Python's ``hash``)
    would run some instances twice and others never."""
    code = ("import json, sys; from harness.run.plan import shard_of; "
            "print(json.dumps([shard_of(k, 5) for k in json.loads(sys.stdin.read())]))")
    seen = []
    for seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code], input=json.dumps(KEYS), text=True,
                             capture_output=True, check=True, cwd=REPO,
                             env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)})
        seen.append(json.loads(out.stdout))
    assert seen[0] == seen[1] == [shard_of(k, 5) for k in KEYS]


def test_a_shard_of_a_frozen_selection_keeps_only_both() -> None:
    """A resume of a shard: the ancestor's selection, still only this shard's part of it."""
    wanted = KEYS[::3]
    spec = ShardSpec(index=2, count=3)
    kept = select_keys(KEYS, plan(spec, wanted))
    chosen = set(wanted)
    assert kept == [k for k in KEYS if k in chosen and shard_of(k, 3) == 2]
    assert kept and set(kept) < set(wanted)
    assert select_keys(KEYS, plan(None, wanted)) == wanted
    assert select_keys(KEYS, plan(None)) == KEYS


def test_the_shard_option() -> None:
    assert parse_shard(" 2 / 8 ") == ShardSpec(index=2, count=8)
    assert str(parse_shard("1/1")) == "1/1"
    assert parse_shard(None) is None and parse_shard("") is None
    with pytest.raises(PlanError, match="out of range"):
        parse_shard("9/8")
    with pytest.raises(PlanError, match="malformed: use I/N"):
        parse_shard("2of8")
