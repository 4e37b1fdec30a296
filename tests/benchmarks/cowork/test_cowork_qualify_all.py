"""``harness cowork qualify --all`` (issue 26 point 5): every task, the servers started once
per distinct server set, a table of the tasks that can run on the image and of those that
cannot with the reason per server, and the count.

No Docker: the grouping, the per-server summary and the table from a report. Docker: the
fixture plus a task sharing a set and two tasks naming a server that cannot start, two
containers at a time: six sets for eight tasks, six ready, the broken server's reason in the
table.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.cowork_bench.qualify import (
    QualifyReport,
    ServerSetQualification,
    TaskQualification,
    render_table,
    server_sets,
    summarise_servers,
)
from benchmarks.cowork_bench.tasks import CoworkTask
from tests.benchmarks.cowork.cowork_helpers import FIXTURE
from tests.support.suite import REPO_ROOT

BROKEN_YAML = """type: stdio
name: broken
params:
  command: /nonexistent/mcp-server-binary
  args: []
client_session_timeout_seconds: 10
"""


def task(iid: str, *servers: str) -> CoworkTask:
    return CoworkTask(instance_id=iid, servers=servers, local_tools=(), has_initial_workspace=False,
                      has_groundtruth=False, prefix=iid.split("-")[0])  # fmt: skip


def test_tasks_are_grouped_by_their_distinct_server_set() -> None:
    tasks = [task("a", "excel", "filesystem"), task("b", "filesystem", "excel"),
             task("c", "emails"), task("d", "excel", "filesystem", "excel"), task("e")]  # fmt: skip
    groups = server_sets(tasks)
    assert list(groups) == [("excel", "filesystem"), ("emails",), ()]
    assert [t.instance_id for t in groups[("excel", "filesystem")]] == ["a", "b", "d"]


def report_of(tasks: list[CoworkTask], states: dict[str, dict[str, str]]) -> QualifyReport:
    """A ``--all`` report whose sets' first tasks had ``states``."""
    out, sets = [], []
    for key, members in server_sets(tasks).items():
        first = members[0].instance_id
        servers = states[first]
        ready = all(s == "ready" for s in servers.values())
        tools = {n: ["t1", "t2"] for n, s in servers.items() if s == "ready"}
        out += [TaskQualification(task=t.instance_id, ready=ready, servers=servers, tools=tools)
                for t in members]  # fmt: skip
        sets.append(ServerSetQualification(servers=list(key), started_in=first, seconds=1.0,
                                           tasks=[t.instance_id for t in members], ready=ready))  # fmt: skip
    by_task = {q.task: q for q in out}
    return QualifyReport(cowork_root="/bench", image_id="sha256:img", tasks=out, seconds=9.0,
                         mode="server_set", pg_image_id="sha256:pg", server_sets=sets,
                         server_summary=summarise_servers(tasks, sets, by_task))  # fmt: skip


def test_summary_and_table_give_the_count_and_the_reason_per_server() -> None:
    tasks = [task("a", "excel", "filesystem"), task("b", "excel", "filesystem"),
             task("c", "emails", "filesystem"), task("d", "filesystem")]  # fmt: skip
    why = "failed: node: /opt/local_servers/filesystem/dist/index.js | not found"
    report = report_of(tasks, {
        "a": {"excel": "ready", "filesystem": why},
        "c": {"emails": "ready", "filesystem": why},
        "d": {"filesystem": why},
    })  # fmt: skip
    assert report.ready_count == 0
    summary = {e.name: e for e in report.server_summary}
    assert (summary["filesystem"].tasks, summary["filesystem"].sets_not_ready) == (4, 3)
    assert summary["filesystem"].reasons == [why]  # the same reason once
    assert (summary["excel"].tasks, summary["excel"].sets_ready) == (2, 1)
    assert [e.name for e in report.server_summary] == ["filesystem", "excel", "emails"]
    table = render_table(report)
    assert "**0 of 4 tasks can run on this image** (4 cannot)" in table
    assert "3 distinct server sets" in table
    assert "| filesystem | 4 | 0 | 3 | failed: node: /opt/local_servers/filesystem/dist/index.js \\| not found |" in table  # fmt: skip
    assert "| a | **filesystem** failed" in table and "| excel |" in table
    assert "## Tasks that can run (0)" in table and "## Tasks that cannot run (4)" in table

    ok = report_of(tasks[:2], {"a": {"excel": "ready", "filesystem": "ready"}})
    table = render_table(ok)
    assert "**2 of 2 tasks can run on this image** (0 cannot)" in table
    assert "| b | excel (2), filesystem (2) |" in table


def qualify_all_checkout(tmp: Path) -> Path:
    """The fixture, a task sharing the excel-sales-summary set, and two tasks naming a
    server whose command does not exist, committed."""
    root = tmp / "bench"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns(".ruff_cache", "__pycache__"))
    (root / "configs" / "mcp_servers" / "broken.yaml").write_text(BROKEN_YAML)
    pool = root / "tasks" / "finalpool"
    for name, base, servers in (
        ("excel-sales-summary-again", "excel-sales-summary", ["excel", "filesystem"]),
        ("email-broken", "email-reply-invoice", ["emails", "broken"]),
        ("email-broken-again", "email-reply-invoice", ["broken", "emails"]),
    ):
        shutil.copytree(pool / base, pool / name)
        config = json.loads((pool / name / "task_config.json").read_text())
        config["needed_mcp_servers"] = servers
        (pool / name / "task_config.json").write_text(json.dumps(config))
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "bench"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    return root


@pytest.mark.slow
@pytest.mark.docker
def test_qualify_all_starts_each_server_set_once_and_writes_the_table(tmp_path: Path) -> None:
    root = qualify_all_checkout(tmp_path)
    table, out = tmp_path / "table.md", tmp_path / "qualify.json"
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "cowork", "qualify", "--cowork-root", str(root),
         "--all", "--jobs", "2", "--table", str(table), "--output", str(out)],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr  # two tasks cannot run
    lines = proc.stdout.splitlines()
    assert "qualified 8 task(s) in 6 server set(s): 6 ready, 2 refused" in lines[-2]
    assert lines[-1] == f"table: {table}"
    set_lines = [ln for ln in lines if ln.startswith(("ready ", "REFUSED "))]
    assert len(set_lines) == 6  # one start per distinct set
    assert any(ln.startswith("ready    [2 task(s)] excel+filesystem: ") for ln in set_lines)
    assert any(ln.startswith("REFUSED  [2 task(s)] broken+emails: broken failed")
               for ln in set_lines)  # fmt: skip

    report = json.loads(out.read_text())
    assert report["mode"] == "server_set" and len(report["tasks"]) == 8
    sets = {tuple(s["servers"]): s for s in report["server_sets"]}
    assert len(sets) == 6
    assert sets[("excel", "filesystem")]["tasks"] == ["excel-sales-summary",
                                                      "excel-sales-summary-again"]  # fmt: skip
    by_task = {t["task"]: t for t in report["tasks"]}
    assert by_task["excel-sales-summary-again"]["ready"]
    assert set(by_task["excel-sales-summary-again"]["tools"]["excel"]) >= {"write_sheet"}
    broken = by_task["email-broken-again"]
    assert not broken["ready"] and broken["servers"]["emails"] == "ready"
    assert "/nonexistent/mcp-server-binary" in broken["servers"]["broken"]

    text = table.read_text()
    assert "**6 of 8 tasks can run on this image** (2 cannot)" in text
    assert "6 distinct server sets started once each" in text
    row = next(ln for ln in text.splitlines() if ln.startswith("| broken |"))
    assert row.startswith("| broken | 2 | 0 | 1 | failed:") and "/nonexistent/mcp-server" in row
    assert "| email-broken | **broken** failed" in text
    assert "| gcal-standup-week | " in text.split("## Tasks that cannot run")[0]
