"""Resume: new root naming its ancestors, settled carried forward, failures re-run."""

from __future__ import annotations

import json


def test_worker_crash_gets_a_row_and_resume_reruns_only_it(suite):
    suite.tasks([{"id": "ok", "work": "succeed", "count": 3}, {"id": "boom", "work": "crash"},
                 {"id": "half", "work": "partial", "score": 0.5}])
    first = suite.run("-n", "2")
    assert first.rc == 1, first.out
    boom = first.latest["boom"]
    assert boom["status"] == "infra_failed" and boom["reason_code"] == "worker_crashed"
    assert boom["worker"].startswith("gw")
    # the crashed instance now succeeds: the resume must run it and nothing else
    suite.tasks([{"id": "ok", "work": "succeed", "count": 3}, {"id": "boom", "work": "succeed"},
                 {"id": "half", "work": "partial", "score": 0.5}])
    second = suite.run("-n", "2", "--resume-from", str(first.root))
    assert second.rc == 0, second.out
    assert second.executions() == ["boom"]
    rows = second.latest
    assert rows["boom"]["status"] == "completed" and rows["boom"]["attempt"] == 2
    carried = rows["half"]
    assert carried["status"] == "skipped" and carried["reason_code"] == "settled_in_ancestor"
    assert carried["score"] == 0.5 and carried["carried_from"] == first.manifest["run_id"]
    assert carried["details"]["run"]["carried_status"] == "completed"
    m = second.manifest
    assert m["resume"]["ancestors"] == [str(first.root)]
    assert m["resume"]["generation"] == 1
    assert m["resume"]["carried"] == 4 and m["resume"]["to_run"] == 1
    assert abs(m["mean_score"] - (4.5 / 5)) < 1e-9


def test_resume_refuses_a_different_config_naming_the_field(suite):
    suite.tasks([{"id": "a", "work": "infra"}])
    first = suite.run()
    second = suite.run("--resume-from", str(first.root), "--selftest-scale", "2")
    assert second.rc == 2
    second.result.stdout.fnmatch_lines([f"*--resume-from {first.root}: its configuration differs in selftest.scale; *"])
    assert second.manifest["refusal"]["reason"] == "config_mismatch"
    # issue 41: the refusal gives the run's own recorded resume command
    recorded = first.manifest["resume_command"]
    assert recorded and f"resume with the run's own command: {recorded}" in second.out


def test_resume_keeps_selection_unless_selectors_given(suite):
    suite.tasks([{"id": "alpha", "work": "infra"}, {"id": "bravo", "work": "infra"},
                 {"id": "charlie", "work": "infra"}])
    first = suite.run("-k", "alpha or bravo")
    assert sorted(first.latest) == ["alpha", "bravo"]
    again = suite.run("--resume-from", str(first.root))
    assert sorted(again.latest) == ["alpha", "bravo"]
    assert again.manifest["selection"]["source"] == "ancestor"
    narrowed = suite.run("--resume-from", str(first.root), "-k", "bravo")
    assert sorted(narrowed.latest) == ["bravo"]


def test_recovery_generations_are_bounded(suite):
    suite.tasks([{"id": "a", "work": "infra"}])
    root = suite.run().root
    for _ in range(2):
        run = suite.run("--resume-from", str(root))
        assert run.rc == 1, run.out
        root = run.root
    third = suite.run("--resume-from", str(root))
    assert third.rc == 2
    third.result.stdout.fnmatch_lines(["*: this would be recovery generation 3 with 1 instance(s) still to"
                                       " run, above --max-recovery-generations 2; *"])
    allowed = suite.run("--resume-from", str(root), "--max-recovery-generations", "3")
    assert allowed.rc == 1 and allowed.manifest["resume"]["generation"] == 3


def test_resume_with_nothing_remaining(suite):
    suite.tasks([{"id": "a", "work": "succeed"}])
    first = suite.run()
    again = suite.run("--resume-from", str(first.root))
    assert again.rc == 0
    assert again.manifest["outcome"] == "nothing_remaining"
    assert again.executions() == []


def test_resume_refuses_cycles_and_missing_ledgers(suite):
    suite.tasks([{"id": "a", "work": "infra"}])
    first = suite.run()
    second = suite.run("--resume-from", str(first.root))
    manifest = json.loads((first.root / "run_manifest.json").read_text())
    manifest["resume"]["ancestors"] = [str(second.root)]
    (first.root / "run_manifest.json").write_text(json.dumps(manifest))
    cyc = suite.run("--resume-from", str(second.root))
    assert cyc.rc == 2, cyc.out
    cyc.result.stdout.fnmatch_lines([f"*--resume-from {second.root}: the ancestry has a cycle at *"])
    (second.root / "result_index.jsonl").unlink()
    gone = suite.run("--resume-from", str(second.root))
    assert gone.rc == 2, gone.out
    gone.result.stdout.fnmatch_lines([f"*--resume-from {second.root}: its ledger result_index.jsonl is missing; *"])


def test_resume_from_a_dry_run_runs_everything_with_the_chosen_agent(suite):
    suite.tasks([{"id": "a", "work": "succeed"}, {"id": "b", "work": "fail"}])
    dry = suite.run("--dry-run")
    real = suite.run("--resume-from", str(dry.root), "--agent", "oracle")
    assert real.rc == 0, real.out
    assert sorted(real.executions()) == ["a", "b"]
    assert real.statuses() == {"a": "completed", "b": "completed"}


def test_resume_refuses_dropping_an_option_only_the_ancestor_recorded(suite):
    """``sandbox.runtime`` is recorded only when ``--runtime`` is given: a resume without the
    flag would run under the daemon's default runtime, so it is refused naming the key (only
    a retired key, such as ``programbench.eval``, is ignored)."""
    suite.tasks([{"id": "a", "work": "succeed"}])
    first = suite.run("--dry-run", "--runtime", "runsc")
    assert first.rc == 0, first.out
    assert first.manifest["config"]["sandbox.runtime"] == "runsc"
    dropped = suite.run("--dry-run", "--resume-from", str(first.root))
    assert dropped.rc == 2, dropped.out
    dropped.result.stdout.fnmatch_lines([f"*--resume-from {first.root}: its configuration differs in sandbox.runtime; *"])
    assert dropped.manifest["refusal"]["reason"] == "config_mismatch"
    kept = suite.run("--dry-run", "--resume-from", str(first.root), "--runtime", "runsc")
    assert kept.rc == 0, kept.out
