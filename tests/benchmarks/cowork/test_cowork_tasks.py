"""Task discovery and the benchmark provenance gate."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from benchmarks.cowork_bench import PINNED_COMMIT
from benchmarks.cowork_bench.phases import InstanceEnv, support_tar, task_tar
from benchmarks.cowork_bench.tasks import (
    TaskConfigError,
    bench_provenance,
    bench_version,
    check_provenance,
    discover_tasks,
    load_task,
)
from harness.core.errors import RefusalError
from tests.benchmarks.cowork.cowork_helpers import FIXTURE

CONFIG = {"needed_mcp_servers": ["emails", "pdf-tools"], "needed_local_tools": ["history"]}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip


def make_bench(root: Path, names: list[str]) -> Path:
    pool = root / "tasks" / "finalpool"
    for name in names:
        (pool / name / "docs").mkdir(parents=True)
        (pool / name / "task_config.json").write_text(json.dumps(CONFIG))
    (pool / ".utils").mkdir(parents=True, exist_ok=True)
    (pool / ".gitignore").write_text("tmp/\n")
    return root


def test_fixture_tasks_are_discovered_with_their_facts() -> None:
    tasks = {t.instance_id: t for t in discover_tasks(FIXTURE)}
    assert sorted(tasks) == [
        "email-reply-invoice",
        "email-weekly-report",
        "excel-sales-summary",
        "gcal-standup-week",
        "sklad-reorder-excel",
    ]
    sales = tasks["excel-sales-summary"]
    assert sales.servers == ("filesystem", "excel")
    assert sales.has_initial_workspace and sales.has_groundtruth
    assert sales.prefix == "excel"
    assert sales.module("evaluation") == "tasks.finalpool.excel-sales-summary.evaluation.main"
    # groundtruth_workspace with only .gitkeep counts as no groundtruth (like upstream's 4)
    assert not tasks["gcal-standup-week"].has_groundtruth
    assert not tasks["gcal-standup-week"].has_initial_workspace


def tar_names(data: bytes) -> set[str]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return set(tar.getnames())


def test_the_agent_containers_task_tree_has_no_groundtruth_or_evaluator() -> None:
    iid = "excel-sales-summary"
    env = InstanceEnv(load_task(FIXTURE, iid), FIXTURE, FIXTURE, "net", None, None, "img")  # type: ignore[arg-type]
    arc = f"tasks/finalpool/{iid}"
    full, agent = tar_names(task_tar(env, sanitised=False)), tar_names(task_tar(env, True))
    answers = {f"{arc}/groundtruth_workspace", f"{arc}/evaluation", f"{arc}/evaluation/main.py"}
    assert answers <= full  # the eval container gets them ...
    assert {n for n in agent if "groundtruth_workspace" in n or "/evaluation" in n} == set()
    assert {f"{arc}/docs/task.md", f"{arc}/preprocess/main.py", f"{arc}/task_config.json",
            f"{arc}/initial_workspace"} <= agent  # fmt: skip
    # ... and the support tree (every container) holds no task and no seed
    support = tar_names(support_tar(str(FIXTURE)))
    assert not {n for n in support if n.split("/")[0] in ("tasks", "db")}


def test_dot_entries_and_dirs_without_config_are_skipped(tmp_path: Path) -> None:
    root = make_bench(tmp_path, ["b-task", "a-task"])
    (root / "tasks" / "finalpool" / "no-config").mkdir()
    tasks = discover_tasks(root)
    assert [t.instance_id for t in tasks] == ["a-task", "b-task"]
    assert tasks[0].keywords() == ["server_emails", "server_pdf_tools", "prefix_a"]


def test_496_tasks_are_discovered_well_under_a_second(tmp_path: Path) -> None:
    root = make_bench(tmp_path, [f"task-{i:03d}" for i in range(496)])
    started = time.perf_counter()
    tasks = discover_tasks(root)
    assert len(tasks) == 496
    assert time.perf_counter() - started < 0.5


def test_a_root_without_finalpool_is_refused_naming_the_option(tmp_path: Path) -> None:
    with pytest.raises(RefusalError, match="--cowork-root") as err:
        discover_tasks(tmp_path)
    assert err.value.reason == "bench_root_invalid"


def test_a_broken_task_config_names_the_file(tmp_path: Path) -> None:
    root = make_bench(tmp_path, ["bad"])
    (root / "tasks" / "finalpool" / "bad" / "task_config.json").write_text("{not json")
    with pytest.raises(TaskConfigError, match=r"bad/task_config\.json"):
        discover_tasks(root)


def test_fixture_seed_dump_is_its_readable_source() -> None:
    assert (
        gzip.decompress((FIXTURE / "db" / "init.sql.gz").read_bytes())
        == (FIXTURE / "db" / "init.sql").read_bytes()
    )


# --------------------------------------------------------------------------- provenance


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = make_bench(tmp_path / "bench", ["a-task"])
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "init")
    return root


def test_clean_checkout_at_the_expected_commit_passes(checkout: Path) -> None:
    head = git(checkout, "rev-parse", "HEAD")
    prov = bench_provenance(checkout, expected=head)
    assert (prov.kind, prov.head, prov.dirty) == ("checkout", head, False)
    check_provenance(prov)
    assert bench_version(prov) == head


def test_other_commit_is_refused_naming_the_checkout_command(checkout: Path) -> None:
    prov = bench_provenance(checkout)  # default: the upstream pin
    assert prov.expected == PINNED_COMMIT
    with pytest.raises(RefusalError) as err:
        check_provenance(prov)
    msg = str(err.value)
    assert err.value.reason == "bench_mismatch"
    assert f"checkout {PINNED_COMMIT}" in msg and "--cowork-allow-bench-commit-mismatch" in msg
    assert "\n" not in msg
    check_provenance(prov, allow_other_commit=True)


def test_dirty_checkout_is_refused_unless_allowed(checkout: Path) -> None:
    (checkout / "tasks" / "finalpool" / "a-task" / "task_config.json").write_text("{}")
    head = git(checkout, "rev-parse", "HEAD")
    prov = bench_provenance(checkout, expected=head)
    assert prov.dirty and prov.status_entries
    with pytest.raises(RefusalError, match="--cowork-allow-dirty-bench") as err:
        check_provenance(prov)
    assert err.value.reason == "bench_dirty"
    check_provenance(prov, allow_dirty=True)
    assert bench_version(prov).endswith("+dirty")


def test_embedded_benchmark_records_the_containing_repo_and_its_subtree(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    bench = make_bench(repo / "fixtures" / "mini", ["a-task"])
    (repo / "other.txt").write_text("x")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "init")
    prov = bench_provenance(bench)
    assert prov.kind == "embedded" and prov.subtree == "fixtures/mini"
    assert prov.head == git(repo, "rev-parse", "HEAD")
    assert prov.tree == git(repo, "rev-parse", "HEAD:fixtures/mini")
    assert prov.expected is None  # the upstream pin does not apply to a fixture
    check_provenance(prov)
    # A change elsewhere in the containing repo does not make the benchmark dirty ...
    (repo / "other.txt").write_text("changed")
    assert bench_provenance(bench).dirty is False
    # ... an untracked file under it does.
    (bench / "tasks" / "finalpool" / "a-task" / "stray.txt").write_text("x")
    with pytest.raises(RefusalError, match="--cowork-allow-dirty-bench"):
        check_provenance(bench_provenance(bench))


def test_plain_directory_is_refused_unless_allowed(tmp_path: Path) -> None:
    root = make_bench(tmp_path / "plain", ["a-task"])
    prov = bench_provenance(root)
    assert prov.kind == "plain" and prov.head is None
    with pytest.raises(RefusalError, match="not a git checkout") as err:
        check_provenance(prov)
    assert err.value.reason == "bench_identity_unavailable"
    check_provenance(prov, allow_dirty=True)
