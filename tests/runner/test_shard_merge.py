"""Shards: stable membership, frozen in the manifest; merge checks and combines them."""

from __future__ import annotations

import json
import subprocess

from tests.support.suite import run_cli

TASKS = [{"id": "t", "work": "partial", "score": 0.25, "count": 12}]


def harness(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args)


def test_three_shards_merge_to_the_unsharded_set(suite, tmp_path):
    suite.tasks(TASKS)
    whole = suite.run()
    shards = [suite.run("--shard", f"{i}/3") for i in (1, 2, 3)]
    sets = [set(s.latest) for s in shards]
    assert all(sets) and sum(len(s) for s in sets) == 12
    assert set.union(*sets) == set(whole.latest)
    assert shards[1].manifest["shard"] == {"index": 2, "count": 3}
    again = suite.run("--shard", "2/3")
    assert set(again.latest) == sets[1], "membership must be stable"
    out = tmp_path / "merged"
    proc = harness("merge", *(str(s.root) for s in shards), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    merged = [json.loads(x) for x in (out / "result_index.jsonl").read_text().splitlines()]
    assert {r["instance_id"] for r in merged} == set(whole.latest)
    manifest = json.loads((out / "run_manifest.json").read_text())
    assert manifest["selection"]["count"] == 12
    assert abs(manifest["mean_score"] - whole.manifest["mean_score"]) < 1e-9


def test_merge_refuses_bad_sets(suite, tmp_path):
    suite.tasks(TASKS)
    s1, s2, s3 = (suite.run("--shard", f"{i}/3") for i in (1, 2, 3))
    other = suite.run("--shard", "3/3", "--selftest-scale", "2")
    cases = [
        ([s1, s2], "shard(s) 3/3 missing"),
        ([s1, s2, s3, s3], "appears twice"),
        ([s1, s2, other], "different config fingerprints"),
    ]
    for i, (runs, message) in enumerate(cases):
        proc = harness("merge", *(str(r.root) for r in runs), "--output", str(tmp_path / f"o{i}"))
        assert proc.returncode == 2, proc.stdout
        assert message in proc.stderr
        assert not (tmp_path / f"o{i}").exists()
    existing = tmp_path / "exists"
    existing.mkdir()
    proc = harness("merge", str(s1.root), str(s2.root), str(s3.root), "--output", str(existing))
    assert proc.returncode == 2 and "already exists" in proc.stderr


def test_resume_reuses_the_frozen_shard(suite):
    suite.tasks([{"id": "t", "work": "infra", "count": 9}])
    first = suite.run("--shard", "1/3")
    second = suite.run("--resume-from", str(first.root))
    assert set(second.latest) == set(first.latest)
    assert second.manifest["shard"] == {"index": 1, "count": 3}
    clash = suite.run("--resume-from", str(first.root), "--shard", "2/3")
    assert clash.rc == 2, clash.out
    clash.result.stdout.fnmatch_lines(["*--shard * differs from the ancestor's shard *; drop --shard to reuse the frozen one*"])
