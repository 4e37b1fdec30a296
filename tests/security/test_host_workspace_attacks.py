"""Issue 43 (1): the specification's host workspace, attacked. The gateway agent's task
works on a workspace seeded under the run root and mounted on ``/workspace``; the reference
agent server writes and reads files through its host path. The agent plants links to host
files, to the run's own ledger and to a folder outside, marks its files setuid, and tries to
read the reference through the host path and inside the sandbox. Asserted: the server works
through the host path (the oracle, written there, scores 1.0 with the official eval), no
write or read leaves the folder, the reference stays unreadable through it, the folder is
removed once the submission is collected, and the body carries both host-path fields."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.fixture import ensure_fixture
from tests.agents.agents_support import start_server
from tests.security.agentexec_support import TARGET
from tests.support.suite import run_pytest

pytestmark = pytest.mark.docker


def step(**kw: Any) -> dict[str, Any]:
    return {"continue_on_error": True, **kw}


def plan(outside: Path, ledger: Path) -> dict[str, Any]:
    files = ensure_fixture().oracle_contents()
    steps = [step(write={"path": rel, "content": data.decode(),
                         "mode": 0o755 if rel.endswith(".sh") else 0o644})
             for rel, data in sorted(files.items())]
    steps += [
        step(run=f"ln -s {ledger} ledger_link; ln -s {outside} out_dir; ln -s /etc/hostname "
                 f"etc_link; cp README.md suid.sh; chmod 4755 suid.sh; chmod g+s README.md"),
        step(write={"path": "ledger_link", "content": "pwned\n"}),
        step(write={"path": "out_dir/planted", "content": "pwned\n"}),
        step(read="etc_link"),
        step(read="reference_executable"),
        step(read="out_dir/secret"),
        step(run="cat reference_executable > stolen.bin; cp reference_executable stolen2.bin"),
        step(read="compile.sh"),
        step(run="readlink reference_executable; stat -c '%s %a' stolen.bin; "
                 "stat -c %a suid.sh"),
    ]
    return {"steps": steps}


def test_the_host_workspace_keeps_the_agent_in_its_folder(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host secret\n")
    root = tmp_path / "run"
    ledger = root / "result_index.jsonl"
    server = start_server(tmp_path / "server", {"default_plan": plan(outside, ledger)})
    try:
        run = run_pytest(TARGET, root, "--pb-fixtures", "-k", "calculator", "--agent",
                         "gateway", "--gateway-url", server.url, "--gateway-poll-sec", "0.2")
    finally:
        server.stop()
    row = run.latest[FIXTURE_ID]
    assert row["score"] == 1.0, (row["reason_code"], row.get("error"))  # through the host path
    folder = root / "programbench" / FIXTURE_ID / "host_workspace" / "workspace"
    body = json.loads((root / row["output_paths"]["task_body"]).read_text())
    assert body["workspace_root"] == body["executor_ref"]["workspace_host_path"] == str(folder)
    assert body["executor_ref"]["workspace_backend_path"] == "/workspace"
    steps = json.loads((root / row["output_paths"]["task_result"]).read_text())["steps"]
    by_path = {s[k]["path"]: s[k] for s in steps for k in ("wrote", "read")
               if isinstance(s.get(k), dict)}
    assert by_path["ledger_link"]["refused"] == "symlink"
    assert by_path["out_dir/planted"]["refused"] == "symlink"
    assert by_path["etc_link"]["refused"] == "symlink"
    assert by_path["out_dir/secret"]["refused"] == "symlink"
    assert by_path["reference_executable"]["refused"] == "protected_artifact"
    assert by_path["compile.sh"]["bytes"] > 0  # an honest read works
    assert not (outside / "planted").exists() and "pwned" not in ledger.read_text()
    # the reference is a link to the launcher on the sandbox's root filesystem; nothing
    # was read from it; the folder (setuid files and all) is gone once collected
    last = steps[-1]["output_tail"].split()
    assert last[0].startswith("/.harness-launch/") and last[1:3] == ["0", "644"], last
    assert not folder.parent.exists()
