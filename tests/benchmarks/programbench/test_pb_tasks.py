"""Loading and selecting ProgramBench instances."""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.tasks import (
    InstanceOrder,
    fixture_ids,
    get_instance,
    instance_order,
    load_instances,
    programbench_version,
    select_instances,
)
from tests.support.suite import FORK_SERVER, REPO_ROOT, run_env


def test_all_200_tasks_and_the_fixture_tasks_load() -> None:
    everything = load_instances()
    tasks = load_instances(include_fixture=False)
    fixtures = fixture_ids()
    assert len(tasks) == 200
    assert FIXTURE_ID in fixtures and all(i.startswith("testorg__") for i in fixtures)
    assert len(everything) == 200 + len(fixtures)
    difficulty = collections.Counter(i.difficulty for i in tasks)
    assert difficulty == {"medium": 120, "easy": 27, "hard": 18, "none": 35}
    languages = collections.Counter(i.language for i in tasks)
    assert languages == {"rs": 107, "go": 46, "c": 33, "cpp": 12, "hs": 1, "java": 1}
    assert {i.language_name for i in tasks} == {"Rust", "Go", "C", "C++", "Haskell", "Java"}
    assert sum(1 for i in tasks if i.n_clean_hashes) == 161


def test_instance_fields_and_image_names() -> None:
    cmatrix = get_instance("abishekvashok__cmatrix.5c082c6")
    assert cmatrix.repository == "abishekvashok/cmatrix"
    assert (
        cmatrix.image_ref() == "programbench/abishekvashok_1776_cmatrix.5c082c6:task_cleanroom_v6"
    )
    fixture = get_instance(FIXTURE_ID)
    assert fixture.is_fixture and fixture.language == "bash" and fixture.difficulty == "easy"
    with pytest.raises(KeyError, match="unknown ProgramBench instance"):
        get_instance("nobody__nothing.0000000")
    assert programbench_version() == "1.2.5"


def test_loading_in_a_fresh_process_finds_every_task() -> None:
    code = (
        "from benchmarks.programbench.tasks import load_instances;"
        "print(len(load_instances()))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) == 200 + len(fixture_ids())  # its time: tests/perf


def test_filter_is_an_anchored_regex_and_excludes_the_fixture_by_default() -> None:
    ids = [i.instance_id for i in select_instances(filter_spec="abishekvashok|ajeetdsouza")]
    assert ids == ["abishekvashok__cmatrix.5c082c6", "ajeetdsouza__zoxide.67ca1bc"]
    assert select_instances(filter_spec="cmatrix") == []  # re.match, like the official CLI
    assert select_instances(filter_spec="testorg__") == []
    fixture = select_instances(filter_spec="testorg__", include_fixture=True)
    assert [i.instance_id for i in fixture] == fixture_ids()
    only = select_instances(fixtures_only=True)
    assert [i.instance_id for i in only] == fixture_ids()
    assert select_instances(filter_spec="testorg__calculator", fixtures_only=True) == [
        get_instance(FIXTURE_ID)]


def test_slice() -> None:
    every = select_instances()
    assert select_instances(slice_spec="0:5") == every[:5]
    assert select_instances(slice_spec="195:") == every[195:]
    assert select_instances(slice_spec=":-198") == every[:2]
    for bad in ("5", "a:b", "1:2:3:4"):
        with pytest.raises(ValueError, match="invalid slice"):
            select_instances(slice_spec=bad)
    with pytest.raises(ValueError, match="invalid --pb-filter"):
        select_instances(filter_spec="(")


def test_shuffle_is_deterministic_and_matches_the_official_order() -> None:
    from programbench.utils.instance_filters import filter_instances
    from programbench.utils.load_data import load_all_instances

    a = [i.instance_id for i in select_instances(shuffle=True, seed=7)]
    b = [i.instance_id for i in select_instances(shuffle=True, seed=7)]
    c = [i.instance_id for i in select_instances(shuffle=True, seed=8)]
    assert a == b and a != c and sorted(a) == sorted(c)
    # Input order does not matter: sorted first.
    reversed_input = list(reversed(load_instances()))
    d = [i.instance_id for i in select_instances(reversed_input, shuffle=True, seed=7)]
    assert d == a
    # Seed 42 reproduces programbench's own shuffle, filter and slice.
    official = filter_instances(
        [
            i
            for i in load_all_instances(include_tests=False)
            if not i["instance_id"].startswith("testorg__")
        ],
        filter_spec="[a-m]",
        slice_spec="3:40",
        shuffle=True,
    )
    ours = select_instances(shuffle=True, seed=42, filter_spec="[a-m]", slice_spec="3:40")
    assert [i.instance_id for i in ours] == [i["instance_id"] for i in official]


def test_instance_order_record() -> None:
    chosen = select_instances(shuffle=True, seed=3, slice_spec="0:4")
    order = instance_order(chosen, shuffle=True, seed=3, slice_spec="0:4")
    data = order.model_dump()
    assert list(data)[:4] == ["count", "shuffle", "shuffle_seed", "instance_ids"]
    assert data["count"] == 4 and data["shuffle_seed"] == 3
    assert data["instance_ids"] == [i.instance_id for i in chosen]
    assert InstanceOrder.model_validate_json(order.model_dump_json()) == order
    assert instance_order(chosen, shuffle=False, seed=3).shuffle_seed is None


def _collected(*args: str) -> list[str]:
    """Instance ids that ``pytest benchmarks/programbench --collect-only`` selects."""
    out = _pytest("--collect-only", *args, timeout=120)
    assert out.returncode in (0, 5), out.stdout[-4000:]  # 5: none
    return [line.split("[", 1)[1].rstrip("]") for line in out.stdout.splitlines()
            if "::" in line and "[" in line]


def test_slice_applies_to_the_selected_order() -> None:
    """``-m "difficulty('easy')" --pb-slice 0:3`` is the first three easy tasks, not the
    easy tasks among the first three."""
    easy = [i.instance_id for i in select_instances() if i.difficulty == "easy"]
    assert _collected("-m", "difficulty('easy')", "--pb-slice", "0:3") == easy[:3]
    rust = [i.instance_id for i in select_instances(filter_spec="a") if i.language == "rs"]
    assert _collected("-k", "rust", "--pb-filter", "a", "--pb-slice", "1:3") == rust[1:3]


def test_slice_selects_tasks_with_every_attempt() -> None:
    """Issue 41: ``--pb-slice 0:5 --attempts 2`` runs 5 tasks twice, not 5 attempts."""
    first = [i.instance_id for i in select_instances()][:5]
    got = _collected("--pb-slice", "0:5", "--attempts", "2")
    assert sorted(got) == sorted(f"{t}@{k}" for t in first for k in (1, 2)), got


def test_parsed_tasks_are_cached_on_disk_and_a_bad_cache_is_ignored(tmp_path, monkeypatch) -> None:
    from benchmarks.programbench import tasks

    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    tasks._load_cached.cache_clear()
    try:
        parsed = tasks._load_cached()
        files = list(tmp_path.glob("programbench-tasks-*.json"))
        assert len(files) == 1
        tasks._load_cached.cache_clear()
        assert tasks._load_cached() == parsed  # read back from the cache file
        files[0].write_text("{not json")
        tasks._load_cached.cache_clear()
        assert tasks._load_cached() == parsed  # a corrupt cache reloads from the package
        assert len(parsed) == 200 + len(fixture_ids())
    finally:
        tasks._load_cached.cache_clear()


# --pb-fixtures (issue 23 point 8): the offline fixture tasks never join a real selection or
# a real denominator; with the flag they are the whole pool.

def _pytest(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``pytest benchmarks/programbench -q ARGS`` from the repository root: a fork of the
    tests' warm pytest server (its stderr is in its stdout)."""
    env = run_env()
    argv = ["-p", "no:cacheprovider", "benchmarks/programbench", "-q", *args]
    done = FORK_SERVER.run(argv, REPO_ROOT, env, timeout)
    return subprocess.CompletedProcess(argv, done.returncode, done.output, "")


def _dry_run(root: Path, *args: str) -> dict:
    out = _pytest("--dry-run", "--run-root", str(root), *args)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    return json.loads((root / "run_manifest.json").read_text())


def test_real_selections_never_bring_in_a_fixture_task() -> None:
    assert not [i for i in _collected() if i.startswith("testorg__")]
    assert not [i for i in _collected("-k", "easy") if i.startswith("testorg__")]
    assert _collected("-k", "calculator") == []
    assert len(_collected("-k", "not zoxide")) == 199
    assert not [i for i in _collected("--pb-filter", ".") if i.startswith("testorg__")]


def test_pb_fixtures_runs_the_fixture_tasks_only() -> None:
    assert _collected("--pb-fixtures") == fixture_ids()
    assert _collected("--pb-fixtures", "-k", "calculator") == [FIXTURE_ID]
    assert _collected("--pb-fixtures", "--instance", FIXTURE_ID) == [FIXTURE_ID]
    assert _collected("--pb-fixtures", "-k", "zoxide") == []


def test_a_fixture_id_without_the_flag_names_the_flag(tmp_path: Path) -> None:
    out = _pytest("--instance", FIXTURE_ID, "--dry-run", "--run-root", str(tmp_path / "r"))
    assert out.returncode == 2
    assert f"{FIXTURE_ID}: an offline fixture task" in out.stdout + out.stderr
    assert "add --pb-fixtures" in out.stdout + out.stderr
    assert not (tmp_path / "r").exists()


def test_denominators_are_honest(tmp_path: Path) -> None:
    easy = sum(1 for i in select_instances() if i.difficulty == "easy")
    m = _dry_run(tmp_path / "easy", "-k", "easy")
    assert m["selection"]["count"] == easy
    assert m["subset_notice"] == f"{easy} of 200 tasks: not the benchmark score"
    m = _dry_run(tmp_path / "notz", "-k", "not zoxide")
    assert m["selection"]["count"] == 199
    assert m["subset_notice"] == "199 of 200 tasks: not the benchmark score"
    # A resume that widens the selection to every task: 200 of 200, no notice.
    m = _dry_run(tmp_path / "grown", "--resume-from", str(tmp_path / "easy"), "--pb-filter", ".")
    assert m["selection"]["count"] == 200 and m["subset_notice"] is None
    assert m["extra"]["resume_selection"]["added"] == 200 - easy


def test_a_fixture_run_is_its_own_denominator_and_its_resume_keeps_it(tmp_path: Path) -> None:
    fixtures = fixture_ids()
    m = _dry_run(tmp_path / "fx", "--pb-fixtures", "-k", "calculator")
    assert m["selection"]["instance_ids"] == [f"programbench/{FIXTURE_ID}"]
    assert m["config"]["programbench.fixtures"] is True
    assert m["extra"]["benchmark_sizes"] == {"programbench": len(fixtures)}
    expected = None if len(fixtures) == 1 else \
        f"1 of {len(fixtures)} tasks: not the benchmark score"
    assert m["subset_notice"] == expected
    # The resume needs no flag: it resumes the fixture tasks, never the real ones.
    again = _dry_run(tmp_path / "fx2", "--resume-from", str(tmp_path / "fx"))
    assert again["selection"]["instance_ids"] == [f"programbench/{FIXTURE_ID}"]
    assert again["config"]["programbench.fixtures"] is True
    grown = _dry_run(tmp_path / "fx3", "--resume-from", str(tmp_path / "fx"), "--all-instances")
    assert grown["selection"]["instance_ids"] == [f"programbench/{i}" for i in fixtures]
    assert grown["subset_notice"] is None
    # A real run resumed with --pb-fixtures is refused, naming the difference.
    _dry_run(tmp_path / "real", "-k", "cmatrix")
    out = _pytest("--dry-run", "--run-root", str(tmp_path / "mixed"),
                  "--resume-from", str(tmp_path / "real"), "--pb-fixtures")
    assert out.returncode == 2, out.stdout[-2000:]
    assert "programbench.fixtures" in out.stdout + out.stderr


def test_the_gate_tasks_file_selects_the_run_it_gates(tmp_path: Path) -> None:
    """One file for both: ``harness programbench gate --tasks FILE`` and the run's
    ``--task-file FILE`` (issue 23 point 10)."""
    from benchmarks.programbench.gate import load_tasks

    ids = [i.instance_id for i in select_instances(shuffle=True, seed=5, slice_spec="0:20")]
    path = tmp_path / "gate20.json"
    path.write_text(json.dumps({"smoke": ids[:10], "unseen": ids[10:]}))
    assert load_tasks(path).all == ids
    assert sorted(_collected("--task-file", str(path))) == sorted(ids)
    m = _dry_run(tmp_path / "gate", "--task-file", str(path))
    assert m["selection"]["count"] == 20
    assert m["subset_notice"] == "20 of 200 tasks: not the benchmark score"
    assert m["selection"]["selectors"] == {"task_file": str(path.resolve())}


def test_a_bad_programbench_option_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for args in (["--pb-eval", "bogus"], ["--pb-seed", "x"]):
        out = _pytest(*args, "--dry-run", "--run-root", str(tmp_path / "r"))
        text = out.stdout + out.stderr
        assert out.returncode == 2, text[-2000:]
        assert f"{args[0]} '{args[1]}'" in text and "INTERNALERROR" not in text
        assert not (tmp_path / "r").exists()


def test_a_bad_programbench_option_with_collect_only_is_one_line_and_exit_2() -> None:
    for args in (["--pb-eval", "bogus"], ["--pb-seed", "x"]):
        out = _pytest(*args, "--collect-only")
        text = out.stdout + out.stderr
        assert out.returncode == 2, text[-2000:]
        assert f"{args[0]} '{args[1]}'" in text and "INTERNALERROR" not in text
        assert "Traceback" not in text


RENAMED_LINES = {
    ("--eval", "off"): "--eval: renamed --pb-eval; write --pb-eval off",
    ("--cpus=2",): "--cpus: renamed --pb-cpus; write --pb-cpus 2",
    ("--memory", "8g"): "--memory: renamed --pb-memory; write --pb-memory 8g",
    ("--docker-cpus", "2"): "--docker-cpus: renamed --pb-docker-cpus; write --pb-docker-cpus 2",
    ("--task-timeout", "60"): "--task-timeout: renamed --pb-task-timeout; write "
                              "--pb-task-timeout 60",
    ("--redo-existing",): "--redo-existing: renamed --pb-redo-existing; write "
                          "--pb-redo-existing",
}


def test_an_unprefixed_programbench_option_is_refused_naming_the_new_one(tmp_path: Path) -> None:
    """Issue 42: every ProgramBench option carries ``--pb-``. An old spelling is never read
    as something else, nor silently dropped: one line naming the new flag, exit 2, no run
    root; ``--help`` lists only the new spellings."""
    for args, line in RENAMED_LINES.items():
        out = _pytest(*args, "--dry-run", "--run-root", str(tmp_path / "r"))
        text = out.stdout + out.stderr
        assert out.returncode == 2, text[-2000:]
        assert [t for t in text.splitlines() if "renamed" in t] == [f"Exit: {line}"], text
        assert "INTERNALERROR" not in text and "Traceback" not in text
        assert not (tmp_path / "r").exists()
    listed = _pytest("--help").stdout
    assert "--pb-eval=MODE" in listed and "--pb-redo-existing" in listed
    for old in ("--eval", "--cpus", "--memory", "--task-timeout", "--redo-existing"):
        assert re.search(rf"(?<![\w-]){old}(?![\w-])", listed) is None, old


def test_the_new_programbench_options_are_read() -> None:
    """``--pb-eval``, ``--pb-cpus``, ``--pb-memory``, ``--pb-task-timeout`` reach the
    settings (a bad value is refused naming the new flag)."""
    for args, named in ((["--pb-eval", "bogus"], "--pb-eval 'bogus' is unknown"),
                        (["--pb-cpus", "0"], "--pb-cpus '0' is not a positive number"),
                        (["--pb-memory", "lots"], "--pb-memory 'lots' is not a size"),
                        (["--pb-task-timeout", "-1"], "--pb-task-timeout '-1' is not a "
                                                      "positive number")):
        out = _pytest(*args, "--collect-only")
        assert out.returncode == 2 and named in out.stdout, out.stdout[-2000:]


def _package_without_extra_fixture_tasks(base: Path) -> Path:
    """A programbench package like the installed one (every file a link to it) whose task
    folder lacks the two extra fixture tasks, as on a fresh environment or after programbench
    was reinstalled. Returns the folder to put first on PYTHONPATH."""
    import programbench

    from benchmarks.programbench.fixture_tasks import EXTRA_TASKS

    real = Path(programbench.__file__).parent
    pkg = base / "programbench"
    pkg.mkdir(parents=True)
    for entry in real.iterdir():
        if entry.name == "constants.py":  # PACKAGE_ROOT is its resolved folder: a copy
            (pkg / entry.name).write_bytes(entry.read_bytes())
        elif entry.name not in ("data", "__pycache__"):
            (pkg / entry.name).symlink_to(entry)
    (pkg / "data" / "tasks").mkdir(parents=True)
    for entry in (real / "data").iterdir():
        if entry.name != "tasks" and not entry.name.startswith("."):
            (pkg / "data" / entry.name).symlink_to(entry)
    extra = {t.instance_id for t in EXTRA_TASKS}
    for task in (real / "data" / "tasks").iterdir():
        if task.name not in extra:
            (pkg / "data" / "tasks" / task.name).symlink_to(task)
    return base


def test_pb_fixtures_installs_its_tasks_before_listing_them(tmp_path: Path) -> None:
    """Issue 23 point 8 where it meets setup: the two extra fixture tasks live in the
    package's task folder; a --pb-fixtures run (and a resume of one) installs them before the
    task list is read, so it lists all three (never a denominator of 1), and leaves no
    staging folder or lock file in the package."""
    from benchmarks.programbench.fixture_tasks import EXTRA_TASKS, FIXTURE_TASK_IDS

    site = _package_without_extra_fixture_tasks(tmp_path / "site")
    tasks = site / "programbench" / "data" / "tasks"
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1",
           "HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)

    def pytest_(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "benchmarks/programbench",
             "-q", *args], capture_output=True, text=True, timeout=300, env=env)

    def extras_installed() -> bool:
        return all((tasks / t.instance_id / "task.yaml").is_file() for t in EXTRA_TASKS)

    assert not extras_installed()
    # the task list of this package was read once without them (a stale disk cache too)
    listed = subprocess.run(
        [sys.executable, "-c", "from benchmarks.programbench.tasks import fixture_ids; "
                               "print(','.join(fixture_ids()))"],
        capture_output=True, text=True, env=env, check=True)
    assert listed.stdout.split() == [FIXTURE_ID]
    out = pytest_("--pb-fixtures", "--collect-only")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    ids = [line.split("[", 1)[1].rstrip("]") for line in out.stdout.splitlines()
           if "::" in line and "[" in line]
    assert ids == list(FIXTURE_TASK_IDS)
    assert extras_installed()
    left = [p.name for p in tasks.parent.iterdir() if p.name.startswith(".")]
    assert left == [], left  # no staging folder, no lock file

    # a resume of a three-task fixture run, with the tasks gone again
    run = tmp_path / "fx"
    assert pytest_("--pb-fixtures", "--dry-run", "--run-root", str(run)).returncode == 0
    for task in EXTRA_TASKS:
        shutil.rmtree(tasks / task.instance_id)
    again = pytest_("--dry-run", "--run-root", str(tmp_path / "fx2"), "--resume-from", str(run))
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    m = json.loads((tmp_path / "fx2" / "run_manifest.json").read_text())
    assert m["selection"]["instance_ids"] == [f"programbench/{i}" for i in FIXTURE_TASK_IDS]
    assert m["extra"]["benchmark_sizes"] == {"programbench": 3}


def test_collection_loads_no_models_and_no_engine_client() -> None:
    """``--collect-only`` of the 200 tasks stays off pydantic (the file models), the Docker
    SDK and the engine placement: they load when a run starts. The terminal summary's models
    at collection made it 1.5x a plain file (issue 48)."""
    code = (
        "import sys, pytest\n"
        "rc = pytest.main(['benchmarks/programbench', '--collect-only', '-q',"
        " '-p', 'no:cacheprovider'])\n"
        "heavy = ('pydantic', 'docker', 'harness.core.models', 'harness.sandbox.placement',"
        " 'harness.run.samples')\n"
        "print('LOADED', sorted(m for m in heavy if m in sys.modules))\n"
        "sys.exit(rc)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=run_env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "LOADED []" in out.stdout, out.stdout[-500:]
