"""``harness merge`` (harness.run.merge): shards that cannot be combined are refused before
anything is written; a merge holds each selected instance's last row exactly once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.core.models import Outcome, ShardSpec
from harness.run.ledger import ledger_path, read_ledger
from harness.run.manifest import read_manifest
from harness.run.merge import MergeError, merge
from harness.run.plan import shard_of
from tests.runner.runner_support import BENCH, CONFIG, row, write_run

pytestmark = pytest.mark.usefixtures("no_git")

IDS = [f"t{i}" for i in range(12)]


def shard_ids(index: int, count: int) -> list[str]:
    return [i for i in IDS if shard_of(f"{BENCH}/{i}", count) == index]


def shard_run(tmp_path: Path, index: int, count: int = 2, *, ids: list[str] | None = None,
              name: str | None = None, **kw: Any) -> Path:
    ids = shard_ids(index, count) if ids is None else ids
    name = name or f"s{index}of{count}"
    rows = kw.pop("rows", None)
    if rows is None:
        rows = [row(i, Outcome.SCORED if n % 3 else Outcome.AGENT_FAILED, run_id=name)
                for n, i in enumerate(ids)]
    return write_run(tmp_path / name, run_id=name, selection=ids, rows=rows,
                     shard=ShardSpec(index=index, count=count), **kw)


def test_two_shards_merge_into_one_run(tmp_path: Path) -> None:
    s1 = shard_run(tmp_path, 1)
    # shard 2: one instance's row written twice (infra, then scored on a retry); one without
    ids2 = shard_ids(2, 2)
    rows2 = [row(ids2[0], Outcome.INFRA_FAILED, run_id="s2"),
             *(row(i, Outcome.SCORED, run_id="s2") for i in ids2[:-1])]
    s2 = shard_run(tmp_path, 2, rows=rows2)
    out = tmp_path / "merged"
    with pytest.raises(MergeError, match=f"incomplete: 11 of 12 units .*{ids2[-1]}"):
        merge([s2, s1], out)  # issue 41: a unit without a final row
    record = merge([s2, s1], out, accept_partial=True)  # any order
    rows = read_ledger(ledger_path(out)).rows
    keys = [r.key for r in rows]
    assert len(keys) == len(set(keys)) == len(IDS) - 1  # each once; the unrun one has none
    assert {r.key: r.outcome for r in rows}[f"{BENCH}/{ids2[0]}"] is Outcome.SCORED
    merged = read_manifest(out)
    assert merged.shard is None and merged.outcome == "merged" and merged.exit_code == 0
    assert merged.selection.count == len(IDS)  # the denominator counts the unrun instance
    assert (record.shard_count, record.selected, record.rows) == (2, len(IDS), len(IDS) - 1)
    assert sum(merged.counts.values()) == len(IDS) - 1
    assert merged.extra.merged_from == [str(s1), str(s2)]
    assert record.missing == [f"{BENCH}/{ids2[-1]}"] and merged.reportable is False
    assert json.loads((out / "merge.json").read_text())["shard_count"] == 2


def refused(roots: list[Path], out: Path, match: str) -> None:
    with pytest.raises(MergeError, match=match):
        merge(roots, out)
    assert not out.exists()  # a refused merge leaves nothing behind


def test_a_missing_or_repeated_shard_is_refused(tmp_path: Path) -> None:
    s1, s2 = shard_run(tmp_path, 1, 3), shard_run(tmp_path, 2, 3)
    out = tmp_path / "out"
    refused([s1, s2], out, r"shard\(s\) 3/3 missing")
    again = shard_run(tmp_path, 2, 3, name="s2again")
    refused([s1, s2, again], out, r"shard 2/3 appears twice")


def test_shards_of_different_splits_or_options_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    refused([shard_run(tmp_path, 1, 2), shard_run(tmp_path, 2, 3)], out,
            r"different shard counts \[2, 3\]")
    other = shard_run(tmp_path, 2, 2, name="other", config={**CONFIG, "timeout": 5})
    refused([tmp_path / "s1of2", other], out, "different config fingerprints")


def test_a_run_without_shard_is_refused(tmp_path: Path) -> None:
    whole = write_run(tmp_path / "whole", run_id="whole", selection=IDS)
    refused([shard_run(tmp_path, 1), whole], tmp_path / "out", "was not run with --shard")


def test_an_instance_in_two_shards_is_refused(tmp_path: Path) -> None:
    """Shards are disjoint by construction; two roots that both ran an instance would count
    it twice."""
    ids1, ids2 = shard_ids(1, 2), shard_ids(2, 2)
    s1 = shard_run(tmp_path, 1)
    s2 = shard_run(tmp_path, 2, ids=[*ids2, ids1[0]])
    refused([s1, s2], tmp_path / "out", f"instance {BENCH}/{ids1[0]} is in two shards")


def test_unreadable_shards_and_a_used_output_are_refused(tmp_path: Path) -> None:
    s1, s2 = shard_run(tmp_path, 1), shard_run(tmp_path, 2)
    used = tmp_path / "used"
    used.mkdir()
    with pytest.raises(MergeError, match="already exists"):
        merge([s1, s2], used)
    refused([], tmp_path / "out", "no run roots given")
    with ledger_path(s2).open("r+") as fh:
        fh.write("{garbage\n")  # over the first row: corrupt, not a torn tail
    refused([s1, s2], tmp_path / "out", "line 1 is corrupt")
    refused([s1, tmp_path / "nothing"], tmp_path / "out", "is not a run root")
