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


def test_resumed_shards_that_raise_the_attempts_cover_every_attempt(suite, tmp_path):
    """Issue 41: shards split by task, never by attempt. Two shards of 6 tasks at K=1, each
    resumed with --attempts 3, run all 18 attempts between them; merge finds all 18."""
    suite.tasks([{"id": "t", "work": "partial", "score": 0.5, "count": 6}])
    firsts = [suite.run("--shard", f"{i}/2") for i in (1, 2)]
    grown = [suite.run("--resume-from", str(r.root), "--attempts", "3") for r in firsts]
    for first, run in zip(firsts, grown, strict=True):
        tasks = {k.split("@")[0] for k in first.latest}
        assert set(run.latest) == {f"{t}@{k}" for t in tasks for k in (1, 2, 3)}, run.out
    out = tmp_path / "merged"
    proc = harness("merge", *(str(r.root) for r in grown), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "18 units" in proc.stdout or "18 instances" in proc.stdout, proc.stdout
    merged = [json.loads(x) for x in (out / "result_index.jsonl").read_text().splitlines()]
    assert len(merged) == 18


def test_merge_names_units_without_a_final_row_and_refuses_unless_asked(suite, tmp_path):
    """Issue 41: merge checks that the shards cover the work, not only that they are
    disjoint. A shard killed before its last two units ran (its ledger ends early)."""
    suite.tasks([{"id": "t", "work": "partial", "score": 0.5, "count": 6}])
    shards = [suite.run("--shard", f"{i}/2", "--attempts", "2") for i in (1, 2)]
    ledger = shards[1].root / "result_index.jsonl"
    lines = ledger.read_text().splitlines(keepends=True)
    ledger.write_text("".join(lines[:-2]))  # as a SIGKILL leaves it
    lost = sorted(json.loads(x)["instance_id"] for x in lines[-2:])
    out = tmp_path / "merged"
    proc = harness("merge", *(str(s.root) for s in shards), "--output", str(out))
    assert proc.returncode == 2 and not out.exists()
    assert "incomplete: 10 of 12 units have a final row" in proc.stderr, proc.stderr
    assert all(i in proc.stderr for i in lost), proc.stderr
    proc = harness("merge", *(str(s.root) for s in shards), "--output", str(out),
                   "--accept-partial")
    assert proc.returncode == 0, proc.stderr
    assert "incomplete: 10 of 12 units" in proc.stdout
    manifest = json.loads((out / "run_manifest.json").read_text())
    assert manifest["selection"]["count"] == 12  # missing units count 0 in the mean
    assert manifest["reportable"] is False
    assert any("incomplete" in r for r in manifest["not_reportable"])


def test_a_merged_root_reads_its_shards_only_as_they_were_merged(suite, tmp_path):
    """Issue 41: a merged root references its shards' files with checksums. The run model
    finds each row's files in the shard that wrote it; a shard changed after the merge is
    named and not read as the merged one."""
    from harness.run.ledger import ledger_path, read_ledger
    from harness.run.locate import row_root, run_roots
    from harness.run.merge import changed_shards

    suite.tasks([{"id": "t", "work": "partial", "score": 0.5, "count": 4}])
    shards = [suite.run("--shard", f"{i}/2") for i in (1, 2)]
    out = tmp_path / "merged"
    assert harness("merge", *(str(s.root) for s in shards), "--output", str(out)).returncode == 0
    record = json.loads((out / "merge.json").read_text())
    assert all(len(s["ledger_sha256"]) == 64 for s in record["shards"])
    roots = run_roots(out)
    homes = {row.instance_id: row_root(row, out, roots)
             for row in read_ledger(ledger_path(out)).latest.values()}
    for shard in shards:
        assert {k for k, home in homes.items() if home == shard.root} == set(shard.latest)
    assert changed_shards(out) == []
    with ledger_path(shards[0].root).open("a") as fh:  # a shard altered after the merge
        fh.write((ledger_path(shards[0].root).read_text().splitlines()[0]) + "\n")
    assert changed_shards(out) == [f"{shards[0].root}: ledger changed since the merge"]
    assert shards[0].root not in run_roots(out).values()


def test_the_manifest_says_where_each_setting_came_from(suite):
    """Issue 41: settings provenance in the run model: given on this run, inherited by a
    resume from its ancestor, else the default."""
    from harness.core.models import Manifest
    from harness.run.model import RunModel

    suite.tasks([{"id": "t", "work": "partial", "score": 0.5, "count": 2}])
    first = suite.run("--attempts", "2")
    model = RunModel.of_manifest(Manifest.model_validate(first.manifest))
    assert model.source("--attempts") == "given" and model.source("--shard") == "default"
    resumed = suite.run("--resume-from", str(first.root))
    model = RunModel.of_manifest(Manifest.model_validate(resumed.manifest))
    assert model.source("--attempts") == "inherited" and model.attempts == 2
    assert model.source("--resume-from") == "given"
    grown = suite.run("--resume-from", str(first.root), "--attempts", "3")
    model = RunModel.of_manifest(Manifest.model_validate(grown.manifest))
    assert model.source("--attempts") == "given" and len(model.units) == 6
