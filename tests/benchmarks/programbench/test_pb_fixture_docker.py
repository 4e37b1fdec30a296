"""The fixture image as the agent sees it: the reference runs but cannot be read."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from benchmarks.programbench.fixture import FixturePaths, ensure_fixture
from benchmarks.programbench.workspace import prepare_cleanroom
from tests.benchmarks.programbench.pb_support import cleanroom_sandbox, docker_run

pytestmark = pytest.mark.docker

DENIED = """
cd /workspace
cat {ref} > /dev/null && echo CAT_OK
cp {ref} /tmp/copy && echo CP_OK
sha256sum {ref} && echo HASH_OK
head -c 4 {ref} && echo HEAD_OK
echo "run: $(./{ref_name} 2 + 3) $(./{ref_name} 4 '*' 3)"
"""


def _check_agent_view(image: str, ref: str) -> str:
    name = ref.rsplit("/", 1)[-1]
    proc = docker_run(image, DENIED.format(ref=ref, ref_name=name), user="agent")
    out = proc.stdout + proc.stderr
    for ok in ("CAT_OK", "CP_OK", "HASH_OK", "HEAD_OK"):
        assert ok not in out, out
    assert out.count("Permission denied") >= 4, out
    assert "run: 5 12" in out, out
    return out


def test_agent_can_run_but_not_read_the_reference(pb_fixture: FixturePaths) -> None:
    _check_agent_view(pb_fixture.image, "executable")


def test_reference_is_dynamically_linked(pb_fixture: FixturePaths) -> None:
    """Like most real references: loader-injection attacks are exercised on the fixture."""
    proc = docker_run(pb_fixture.image, "LD_TRACE_LOADED_OBJECTS=1 /workspace/executable")
    assert proc.returncode == 0 and "libc.so.6" in proc.stdout, proc


def test_presented_reference_stays_protected(pb_fixture: FixturePaths, tmp_path: Path) -> None:
    with cleanroom_sandbox(pb_fixture.image_id, tmp_path / "run") as sandbox:
        _, first = prepare_cleanroom(sandbox)
        changes, again = prepare_cleanroom(sandbox)  # idempotent
        assert changes == []
        assert first.sha256 == again.sha256 == pb_fixture.reference_sha256
        assert sandbox.protected_hashes[pb_fixture.reference_sha256] == first.size
        res = sandbox.exec(["sh", "-c", DENIED.format(ref="reference_executable",
                                                      ref_name="reference_executable")])
        out = (res.stdout + res.stderr).decode()
        for ok in ("CAT_OK", "CP_OK", "HASH_OK", "HEAD_OK"):
            assert ok not in out, out
        assert "run: 5 12" in out, out
        shown = sandbox.exec("ls -A; stat -c '%u %a' reference_executable; "
                             "git status --porcelain; echo STATUS_DONE").stdout.decode()
        assert shown.split() == [".git", "README.md", "reference_executable", "1999", "4111",
                                 "STATUS_DONE"]  # nothing untracked, no ./executable


def test_image_shape_for_eval(pb_fixture: FixturePaths) -> None:
    proc = docker_run(
        pb_fixture.image,
        "id -un; stat -c '%U' /workspace; git -C /workspace log --oneline | wc -l;"
        'bash -lc \'python3 -c "import pytest, xdist, pytest_timeout; print(\\"py-ok\\")"\'',
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["root", "agent", "1", "py-ok"]
    default_user = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Config.User}}", pb_fixture.image],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert default_user in ("", "root")  # eval writes /etc/resolv.conf as the default user


def test_ensure_fixture_is_idempotent_and_fast_the_second_time(pb_fixture: FixturePaths) -> None:
    started = time.perf_counter()
    again = ensure_fixture()
    assert time.perf_counter() - started < 5
    assert again == pb_fixture
    assert pb_fixture.oracle_contents()["compile.sh"].startswith(b"#!/bin/bash")
    image_id = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Id}}", pb_fixture.image],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert image_id == pb_fixture.image_id
    assert Path(pb_fixture.incorrect_dir, "calculator.sh").read_text().strip().endswith("echo 42")


def test_fixture_files_are_rebuilt_when_removed(tmp_path: Path) -> None:
    import shutil

    first = ensure_fixture(cache_dir=tmp_path)
    assert Path(first.blob_dir).is_relative_to(tmp_path)
    shutil.rmtree(first.blob_dir)
    second = ensure_fixture(cache_dir=tmp_path)
    blob = Path(second.blob_dir) / "testorg__calculator.abc1234" / "tests" / "33128f6b8600.tar.gz"
    assert blob.is_file()
    assert second.image_id == first.image_id  # same recipe: the image is not rebuilt


@pytest.mark.slow  # three fixture evals, a minute: the slow tier
def test_issue23_three_fixture_tasks_solved_partial_failed(tmp_path: Path) -> None:
    """Issue 23: the offline fixture tasks have three outcomes with the oracle agent, each
    scored by the real ``programbench eval`` and agreeing with ``programbench info``."""
    from benchmarks.programbench.fixture_image import fixture_image
    from benchmarks.programbench.fixture_tasks import ORACLE_SCORES
    from benchmarks.programbench.official_eval import run_info
    from benchmarks.programbench.parity import parse_info, percent_text
    from tests.support.suite import run_pytest

    paths = ensure_fixture()
    assert sorted(paths.task_ids) == sorted(ORACLE_SCORES)
    assert sorted(ORACLE_SCORES.values()) == [0.0, 0.75, 1.0]  # failed, partial, solved
    for iid in paths.task_ids:  # one image, tagged as each task's canonical image
        out = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}",
                              fixture_image(iid)], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == paths.image_id
        assert (Path(paths.blob_dir) / iid / "tests").is_dir()
    run = run_pytest("benchmarks/programbench", tmp_path / "run", "--pb-fixtures",
                     "--agent", "oracle")
    assert set(run.latest) == set(ORACLE_SCORES), run.out
    info = parse_info(run_info(run.root / "programbench"))  # the official table
    for iid, want in ORACLE_SCORES.items():
        row = run.latest[iid]
        assert row["outcome"] == "scored" and row["official_eval_status"] == "completed", run.out
        assert row["score"] == want and row["resolved"] is (want == 1.0)
        assert info.lines[iid].percent == percent_text(want)
    assert run.manifest["extra"]["official_parity"]["ok"] is True
    assert run.rc == 0, run.out  # scored, even when unresolved: every instance settled


def test_issue23_fixture_tasks_install_where_the_official_loader_reads(tmp_path: Path) -> None:
    """The extra tasks land whole in a task folder, once; the package's own loader reads them
    (``programbench eval`` and ``info`` use that loader over the package's TASKS_DIR)."""
    from programbench.utils.load_data import get_active_branches, load_all_instances

    from benchmarks.programbench.fixture_tasks import EXTRA_TASKS, install_fixture_tasks

    tasks = tmp_path / "tasks"
    tasks.mkdir()
    assert install_fixture_tasks(tasks) == [t.instance_id for t in EXTRA_TASKS]
    assert install_fixture_tasks(tasks) == []  # idempotent
    loaded = {i["instance_id"]: i for i in load_all_instances(tasks)}
    for task in EXTRA_TASKS:
        inst = loaded[task.instance_id]
        assert inst["image_name"] == f"programbench/{task.instance_id.replace('__', '_1776_')}"
        assert get_active_branches(inst) == [task.branch]
        assert inst["branches"][task.branch]["tests"] == list(task.tests)
    (tasks / EXTRA_TASKS[0].instance_id / "tests.json").write_text("{}")  # damaged: rewritten
    assert install_fixture_tasks(tasks) == [EXTRA_TASKS[0].instance_id]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tasks"]  # no staging, no lock file


def test_concurrent_fixture_installs_leave_whole_tasks_and_no_staging(tmp_path: Path) -> None:
    """Installers in several processes at once (xdist workers on a fresh environment): each
    task is written once and whole, and no staging folder or lock file is left beside the
    task folder, including an older installer's ``.harness-fixture-staging``."""
    import sys

    from benchmarks.programbench.fixture_tasks import EXTRA_TASKS, install_fixture_tasks

    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tmp_path / ".harness-fixture-staging").mkdir()
    (tmp_path / ".harness-fixture-staging" / "install.lock").touch()
    code = ("import sys; from pathlib import Path; "
            "from benchmarks.programbench.fixture_tasks import install_fixture_tasks; "
            "print(','.join(install_fixture_tasks(Path(sys.argv[1]))))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tasks)], text=True,
                              stdout=subprocess.PIPE) for _ in range(4)]
    written = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    ids = [t.instance_id for t in EXTRA_TASKS]
    assert sorted(w for w in written if w) == [",".join(ids)]  # one process wrote them
    assert install_fixture_tasks(tasks) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tasks"]
    assert sorted(p.name for p in tasks.iterdir()) == sorted(ids)
