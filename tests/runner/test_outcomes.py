"""Outcomes, exit status and dry runs."""

from __future__ import annotations


def test_settled_run_exits_0_even_with_unresolved(suite):
    suite.tasks([{"id": "a", "work": "succeed"}, {"id": "b", "work": "fail"},
                 {"id": "c", "work": "agent_fail"}])
    run = suite.run()
    assert run.rc == 0, run.out
    assert run.statuses() == {"a": "completed", "b": "completed", "c": "failed"}
    rows = run.latest
    assert rows["a"]["resolved"] is True and rows["a"]["score"] == 1.0
    assert rows["b"]["resolved"] is False and rows["b"]["reason_code"] == "unresolved"
    assert rows["c"]["outcome"] == "agent_failed" and rows["c"]["score"] is None
    run.result.assert_outcomes(passed=1, failed=2)


def test_infra_failure_is_not_scored_and_exits_1(suite):
    suite.tasks([{"id": "a", "work": "succeed"},
                 {"id": "b", "work": "infra", "reason": "image_missing"},
                 {"id": "c", "work": "raise"}])
    run = suite.run()
    assert run.rc == 1, run.out
    rows = run.latest
    assert rows["b"]["status"] == "infra_failed" and rows["b"]["infra"] is True
    assert rows["b"]["reason_code"] == "image_missing" and rows["b"]["score"] is None
    assert rows["c"]["reason_code"] == "harness_error:RuntimeError"
    run.result.assert_outcomes(passed=1, errors=2)  # infrastructure: pytest errors, not failures
    m = run.manifest
    assert m["outcome"] == "infra_failed" and m["exit_code"] == 1
    run.result.stdout.fnmatch_lines([f"resume with: pytest *--resume-from={run.root}"])


def test_terminal_summary(suite):
    suite.tasks([{"id": "a", "work": "succeed"}, {"id": "b", "work": "partial", "score": 0.5}])
    run = suite.run()
    run.result.stdout.fnmatch_lines([
        "*= harness run =*",
        "run *: 2 selected; completed 2",
        "mean score 0.7500 over 2 (missing counts 0)",
        "outcome completed, exit status 0",
        f"run root {run.root}",
    ])


def test_dry_run_prepares_inputs_and_runs_nothing(suite, mode):
    suite.tasks([{"id": "a", "work": "succeed"}, {"id": "b", "work": "crash"}])
    run = suite.run("--dry-run", *mode)
    assert run.rc == 0, run.out
    assert run.manifest["outcome"] == "dry_run" and run.manifest["dry_run"] is True
    assert run.statuses() == {"a": "skipped", "b": "skipped"}
    assert {r["reason_code"] for r in run.rows} == {"dry_run"}
    assert run.executions() == []
    for iid in ("a", "b"):
        assert (run.root / "selftest" / iid / "selftest_task_body.json").is_file()
    assert run.latest["a"]["output_paths"]["task_body"] == "selftest/a/selftest_task_body.json"


def test_empty_selection_is_an_error(suite):
    suite.tasks([{"id": "a", "work": "succeed"}])
    run = suite.run("-k", "nothing_matches_this")
    assert run.rc == 2
    run.result.stdout.fnmatch_lines(["nothing was selected: check -k, -m, --instance *"])
    assert run.manifest["outcome"] == "empty_selection"


def test_internal_error_still_finalizes_the_manifest(suite, mode):
    (suite.path / "conftest.py").write_text(
        'pytest_plugins = ["harness.testing.plugin"]\n'
        "def pytest_runtest_logfinish(nodeid, location):\n"
        "    if nodeid.endswith('[b]'):\n"
        "        raise RuntimeError('the runner host broke')\n"
    )
    suite.tasks([{"id": "a", "work": "succeed"}, {"id": "b", "work": "succeed"},
                 {"id": "c", "work": "succeed"}])
    run = suite.run(*mode)
    assert run.rc == 1, run.out
    m = run.manifest
    assert m["exit_code"] == 1 and m["outcome"] == "crashed"
    assert m["checkpoint"]["phase"] == "finalized"
    assert len(run.latest) == 3  # every selected instance has a row, even after the crash
