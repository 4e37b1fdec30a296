"""Mock sites: tasks whose preprocess starts a local web server on a fixed port (upstream's
128 ``fetch``/``playwright`` tasks, eight ports shared by two tasks) run concurrently
without colliding, because each instance's agent container has its own network namespace.

Two tasks built on a copy of the fixture rebuild ``tasks/finalpool/<task>/tmp`` in
preprocess (the task tree is writable there, like upstream's staging) and serve it on the
same port 30123; the agent fetches its page from ``127.0.0.1:30123``; each checker wants its
own task's page, so a collision or cross-talk fails one of them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.benchmarks.cowork.cowork_helpers import FIXTURE
from tests.support.suite import run_pytest

TASKS = ("mock-site-alpha", "mock-site-beta")
PORT = 30123

PREPROCESS = f'''"""Rebuilds tmp/ with this task's page and serves it on port {PORT} (detached)."""

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

task = Path(__file__).resolve().parents[1]
tmp = task / "tmp"
if tmp.exists():
    for p in tmp.iterdir():
        p.unlink()
    tmp.rmdir()
tmp.mkdir()
(tmp / "page.txt").write_text(task.name + " price 42\\n")
log = open(tmp / "server.log", "w")
subprocess.Popen([sys.executable, "-m", "http.server", "{PORT}", "--bind", "127.0.0.1"],
                 cwd=tmp, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                 start_new_session=True)
for _ in range(100):
    try:
        urllib.request.urlopen("http://127.0.0.1:{PORT}/page.txt", timeout=1)
        break
    except OSError:
        time.sleep(0.1)
else:
    sys.exit("mock site did not start")
print("mock site up")
'''

CHECKER = '''"""The workspace holds this task's page, as fetched from the mock site."""

import sys
from pathlib import Path

from scripts.mini_db import checker_args

args = checker_args(groundtruth=False)
task = Path(__file__).resolve().parents[1].name
got = (Path(args.agent_workspace) / "page.txt").read_text() if (
    Path(args.agent_workspace) / "page.txt").is_file() else ""
print("page:", got.strip())
sys.exit(0 if got == task + " price 42\\n" else 1)
'''

AGENT = (
    "python3 -c \"import urllib.request; open('page.txt', 'w').write("
    f"urllib.request.urlopen('http://127.0.0.1:{PORT}/page.txt').read().decode())\""
)


def mock_checkout(tmp: Path) -> Path:
    root = tmp / "bench"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns(".ruff_cache", "__pycache__"))
    for name in TASKS:
        task = root / "tasks" / "finalpool" / name
        for part in ("docs", "preprocess", "evaluation"):
            (task / part).mkdir(parents=True)
        (task / "docs" / "task.md").write_text(f"Save the page at port {PORT} as page.txt.\n")
        (task / "docs" / "agent_system_prompt.md").write_text(
            "Workspace: !!<<<<||||workspace_dir||||>>>>!!\n"
        )
        (task / "preprocess" / "main.py").write_text(PREPROCESS)
        (task / "evaluation" / "main.py").write_text(CHECKER)
        (task / "task_config.json").write_text(
            json.dumps({"needed_mcp_servers": ["filesystem"], "needed_local_tools": []})
        )
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "bench"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    return root


@pytest.mark.docker
def test_two_mock_sites_on_one_port_run_concurrently(tmp_path: Path) -> None:
    root = mock_checkout(tmp_path)
    args = [a for name in TASKS for a in ("--instance", name)]
    run = run_pytest("benchmarks/cowork_bench", tmp_path / "run", "--cowork-root", str(root),
                     "--cowork-allow-bench-commit-mismatch", *args, "--agent", "command",
                     "--agent-command", AGENT, "-n", "2", timeout=900)  # fmt: skip
    assert run.rc == 0, run.out
    for name in TASKS:
        row = run.latest[name]
        assert row["status"] == "passed", (name, row)
        inst = run.root / "cowork_bench" / name
        assert "mock site up" in (inst / "preprocess.log").read_text()
