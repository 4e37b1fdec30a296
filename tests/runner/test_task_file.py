"""Selection by name: ``--task-file`` and ``--instance``; unknown ids refused before anything
is recorded; a resume grows a run (a gate list to the whole benchmark)."""

from __future__ import annotations

import json

TASKS = [{"id": "alpha", "work": "succeed"}, {"id": "bravo", "work": "partial", "score": 0.5},
         {"id": "charlie", "work": "succeed"}, {"id": "delta", "work": "fail"}]


def test_task_file_selects_the_ids_it_lists(suite, mode):
    suite.tasks(TASKS)
    listed = suite.path / "gate.txt"
    listed.write_text("# the gate list\nalpha\n\n  charlie   # the second\n")
    run = suite.run("--task-file", str(listed), *mode)
    assert run.rc == 0, run.out
    assert sorted(run.latest) == ["alpha", "charlie"]
    assert sorted(run.executions()) == ["alpha", "charlie"]
    selection = run.manifest["selection"]
    assert selection["instance_ids"] == ["selftest/alpha", "selftest/charlie"]
    assert selection["selectors"] == {"task_file": str(listed.resolve())}


def test_task_file_and_instance_add_up(suite):
    suite.tasks(TASKS)
    listed = suite.path / "one.txt"
    listed.write_text("bravo\n")
    run = suite.run("--task-file", str(listed), "--instance", "delta")
    assert sorted(run.latest) == ["bravo", "delta"]
    assert run.manifest["selection"]["selectors"]["instance"] == ["delta"]


def test_the_gate_tasks_file_selects_the_run_it_gates(suite):
    """The ProgramBench gate's ``--tasks`` JSON ({"smoke": [...], "unseen": [...]}) is a task
    file as it is."""
    suite.tasks(TASKS)
    gate = suite.path / "gate20.json"
    gate.write_text(json.dumps({"smoke": ["alpha", "bravo"], "unseen": ["delta"]}))
    run = suite.run("--task-file", str(gate))
    assert run.rc == 0, run.out
    assert sorted(run.latest) == ["alpha", "bravo", "delta"]


def test_an_unknown_id_exits_2_naming_it_and_records_nothing(suite, mode):
    suite.tasks(TASKS)
    listed = suite.path / "typo.txt"
    listed.write_text("alpha\nalpah\nzulu\n")
    run = suite.run("--task-file", str(listed), *mode)
    assert run.rc == 2, run.out
    run.result.stdout.fnmatch_lines([
        f"*--task-file {listed}: alpah, zulu: no such instance id in selftest (4 instances here)*"])
    run.result.stdout.no_fnmatch_line("*Traceback*")
    run.result.stdout.no_fnmatch_line("INTERNALERROR*")
    assert not run.root.exists(), "an unknown id must record no selection and no row"
    assert suite.run("--task-file", str(listed), "--collect-only", root=run.root).rc != 0


def test_an_unknown_instance_exits_2_and_records_nothing(suite, mode):
    suite.tasks(TASKS)
    run = suite.run("--instance", "alpha", "--instance", "nope", *mode)
    assert run.rc == 2, run.out
    run.result.stdout.fnmatch_lines([
        "*--instance nope: no such instance id in selftest (4 instances here); list them with*"])
    assert not run.root.exists()


def test_a_missing_or_bad_task_file_is_one_line_and_exit_2(suite):
    suite.tasks(TASKS)
    missing = suite.run("--task-file", str(suite.path / "absent.txt"))
    assert missing.rc == 2
    missing.result.stdout.fnmatch_lines([f"*--task-file {suite.path / 'absent.txt'}: no such file*"])
    missing.result.stdout.no_fnmatch_line("*Traceback*")
    assert not missing.root.exists()
    bad = suite.path / "bad.txt"
    bad.write_text("alpha\nnot an id\n")
    run = suite.run("--task-file", str(bad))
    assert run.rc == 2, run.out
    run.result.stdout.fnmatch_lines([f"*--task-file {bad}: line 2: 'not an id' is not an instance id (*"])
    empty = suite.path / "empty.txt"
    empty.write_text("# nothing yet\n\n")
    suite.run("--task-file", str(empty)).result.stdout.fnmatch_lines([
        f"*--task-file {empty} lists no instance id; write one id a line*"])


def test_a_gate_run_grows_to_the_whole_benchmark_by_a_resume(suite, mode):
    """``--resume-from RUN`` alone keeps RUN's selection; with a wider selection (a bigger
    task file, or ``--all-instances``) it grows: settled instances are carried, never run
    twice, and only the new ones run."""
    suite.tasks(TASKS)
    gate = suite.path / "gate.txt"
    gate.write_text("alpha\nbravo\n")
    first = suite.run("--task-file", str(gate), *mode)
    assert first.rc == 0, first.out
    same = suite.run("--resume-from", str(first.root), *mode)
    assert sorted(same.latest) == ["alpha", "bravo"] and same.executions() == []
    assert same.manifest["selection"]["source"] == "ancestor"

    bigger = suite.path / "bigger.txt"
    bigger.write_text("alpha\nbravo\ncharlie\n")
    grown = suite.run("--resume-from", str(first.root), "--task-file", str(bigger), *mode)
    assert grown.rc == 0, grown.out
    assert grown.executions() == ["charlie"]
    assert grown.statuses() == {"alpha": "skipped", "bravo": "skipped", "charlie": "completed"}
    assert grown.latest["bravo"]["score"] == 0.5
    assert grown.manifest["resume"]["carried"] == 2 and grown.manifest["resume"]["to_run"] == 1
    assert grown.manifest["extra"]["resume_selection"] == {
        "ancestor_selected": 2, "selected": 3, "added": 1, "left_out": 0}

    whole = suite.run("--resume-from", str(grown.root), "--all-instances", *mode)
    assert whole.rc == 0, whole.out
    assert whole.executions() == ["delta"]
    assert sorted(whole.latest) == ["alpha", "bravo", "charlie", "delta"]
    assert whole.manifest["selection"]["count"] == 4
    assert whole.manifest["selection"]["selectors"] == {"all_instances": True}
    assert abs(whole.manifest["mean_score"] - 2.5 / 4) < 1e-9


def test_growing_starts_a_new_stage_of_recovery_generations(suite):
    """Two recoveries of a gate run use up --max-recovery-generations 2; growing it is a new
    selection, not a third recovery, and the grown run may be recovered twice again."""
    suite.tasks([{"id": "alpha", "work": "succeed"}, {"id": "bravo", "work": "infra"},
                 {"id": "charlie", "work": "succeed"}])
    gate = suite.path / "gate.txt"
    gate.write_text("alpha\nbravo\n")
    root = suite.run("--task-file", str(gate)).root
    for _ in range(2):
        root = suite.run("--resume-from", str(root)).root
    assert suite.run("--resume-from", str(root)).rc == 2  # a third recovery: refused
    grown = suite.run("--resume-from", str(root), "--all-instances")
    assert grown.rc == 1, grown.out  # bravo still fails; charlie ran
    assert sorted(grown.executions()) == ["bravo", "bravo", "charlie"]  # --retry-infra 1
    assert grown.manifest["resume"]["generation"] == 3
    root = grown.root
    for _ in range(2):
        run = suite.run("--resume-from", str(root))
        assert run.rc == 1, run.out
        assert sorted(run.latest) == ["alpha", "bravo", "charlie"]
        root = run.root
    third = suite.run("--resume-from", str(root))
    assert third.rc == 2, third.out
    third.result.stdout.fnmatch_lines(["*: this would be recovery generation 3 with *"])


def test_workers_run_the_ids_the_controller_read_even_if_the_file_changes(suite):
    """The frozen plan: the controller reads --task-file once; every xdist worker, and the
    one that replaces a crashed worker, runs exactly those ids, even when the file is
    rewritten after the controller read it (here by an admission hook, before any worker
    starts)."""
    suite.tasks([*TASKS, {"id": "echo", "work": "crash"}])
    listed = suite.path / "gate.txt"
    listed.write_text("alpha\necho\ncharlie\n")
    (suite.path / "conftest.py").write_text(
        'pytest_plugins = ["harness.testing.plugin"]\n\n\n'
        "def pytest_harness_admit(config, run):\n"
        f"    open({str(listed)!r}, 'w').write('delta\\n')\n")
    run = suite.run("--task-file", str(listed), "-n", "2")
    assert listed.read_text() == "delta\n"
    assert run.rc == 1, run.out  # echo crashed its worker
    assert sorted(run.executions()) == ["alpha", "charlie", "echo"]
    assert run.statuses() == {"alpha": "completed", "charlie": "completed",
                              "echo": "infra_failed"}
    assert run.latest["echo"]["reason_code"] == "worker_crashed"
    assert run.manifest["selection"]["instance_ids"] == [
        "selftest/alpha", "selftest/charlie", "selftest/echo"]


def test_resuming_the_same_instance_again_and_again_is_bounded(suite, mode):
    """A resume whose selectors add nothing to its ancestor's selection (``--instance X``
    again, ``-k X``) is a recovery, counted by --max-recovery-generations: an instance that
    keeps failing on infrastructure is not retried without limit. Past the limit it is refused
    once the selection is known, before any instance starts (no row, exit 2)."""
    suite.tasks([{"id": "alpha", "work": "succeed"}, {"id": "bravo", "work": "infra"}])
    root = suite.run(*mode).root
    for _ in range(2):
        run = suite.run("--resume-from", str(root), "--instance", "bravo", *mode)
        assert run.rc == 1, run.out
        assert run.executions() == ["bravo", "bravo"]  # tried, and retried (--retry-infra 1)
        assert run.manifest["extra"]["resume_selection"]["added"] == 0
        root = run.root
    third = suite.run("--resume-from", str(root), "--instance", "bravo", *mode)
    assert third.rc == 2, third.out
    third.result.stdout.fnmatch_lines([
        f"*--resume-from {root}: this would be recovery generation 3 with 1 instance(s) still to"
        " run, above --max-recovery-generations 2; *"])
    third.result.stdout.no_fnmatch_line("*Traceback*")
    third.result.stdout.no_fnmatch_line("INTERNALERROR*")
    assert third.executions() == [] and third.rows == []
    m = third.manifest
    assert m["outcome"] == "refused" and m["exit_code"] == 2
    assert m["refusal"]["reason"] == "max_recovery_generations"
    assert suite.run("--resume-from", str(root), "-k", "bravo", *mode).rc == 2
    allowed = suite.run("--resume-from", str(root), "--instance", "bravo",
                        "--max-recovery-generations", "3", *mode)
    assert allowed.rc == 1 and allowed.executions() == ["bravo", "bravo"]
