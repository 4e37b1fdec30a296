"""Tasks as items: one parametrized item per instance, selectable by -k, -m and --instance."""

from __future__ import annotations

import re

TASKS = [
    {"id": "alpha", "work": "succeed", "difficulty": "easy", "language": "rust"},
    {"id": "beta", "work": "succeed", "difficulty": "hard", "language": "go"},
    {"id": "gamma", "work": "fail", "difficulty": "easy", "language": "go"},
]


def test_k_selects_by_attribute_value(suite):
    suite.tasks(TASKS)
    run = suite.run("-k", "easy")
    assert run.rc == 0, run.out
    assert sorted(run.latest) == ["alpha", "gamma"]
    assert run.manifest["selection"]["instance_ids"] == ["selftest/alpha", "selftest/gamma"]
    assert run.manifest["selection"]["selectors"] == {"keyword": "easy"}


def test_m_selects_by_marker_argument(suite, mode):
    suite.tasks(TASKS)
    run = suite.run("-m", "difficulty('easy') and language('go')", *mode)
    assert run.rc == 0, run.out
    assert sorted(run.latest) == ["gamma"]
    keyword = suite.run("-m", "difficulty(value='hard')", *mode)
    assert sorted(keyword.latest) == ["beta"]


def test_instance_option_and_unknown_id(suite):
    suite.tasks(TASKS)
    run = suite.run("--instance", "beta")
    assert sorted(run.latest) == ["beta"]
    bad = suite.run("--instance", "nope")
    assert bad.rc == 2
    bad.result.stdout.fnmatch_lines(["*--instance nope: no such instance id in selftest (3 instances here)*"])
    assert not bad.root.exists()  # nothing selected, no rows (tests/runner/test_task_file.py)


def test_item_ids_are_instance_ids(suite):
    suite.tasks(TASKS)
    run = suite.run("--collect-only", root=suite.path / "unused")
    assert run.rc == 0, run.out
    items = [re.escape(f"test_selftest.py::test_selftest[{task['id']}]") + "$" for task in TASKS]
    for item in items:  # whole lines, one a task (in the order the runner gives them)
        run.result.stdout.re_match_lines([item])
    assert not (suite.path / "unused").exists(), "--collect-only must not create a run root"


def test_invalid_instance_id_is_refused(suite):
    suite.tasks([{"id": "bad id/with slash", "work": "succeed"}])
    run = suite.run()
    assert run.rc != 0
    run.result.stdout.fnmatch_lines(["*invalid instance id 'bad id/with slash': use only letters, *"])


def test_a_project_test_timeout_does_not_cut_an_instance_short(suite):
    """pytest-timeout's per-test limit (this repository sets 900 s for its own tests) is not
    an instance's: a benchmark task is bounded by its own limits (a ProgramBench task may
    work 6 h)."""
    suite.tasks([{"id": "slow", "work": "sleep", "seconds": 2.5}])
    run = suite.run("-o", "timeout=1")
    assert run.rc == 0, run.out
    assert run.statuses() == {"slow": "completed"}
    run.result.stdout.no_fnmatch_line("*Timeout*")
