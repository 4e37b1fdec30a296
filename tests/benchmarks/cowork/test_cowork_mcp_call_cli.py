"""``mcp-call`` against the harness's MCP supervisor, on the host (issue 26 point 2): the
same script and supervisor the agent container runs, with the fixture's ``filesystem``
server. Listing, calls (arguments inline, from stdin, none), every exit status, and that
each call reaches the one persistent server session. Docker runs are in
``test_cowork_mcp_call.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.cowork_bench.mcp_servers import MCP_CALL_SOURCE
from tests.agents.agents_support import free_port
from tests.benchmarks.cowork.cowork_helpers import FIXTURE

SUPERVISOR = MCP_CALL_SOURCE.parent / "harness_mcp.py"
SERVER = FIXTURE / "local_servers" / "mini_office" / "server.py"


@pytest.fixture(scope="module")
def supervisor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The supervisor serving ``filesystem`` on a workspace; (its base URL, the workspace)."""
    tmp = tmp_path_factory.mktemp("mcp")
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("hello from a.txt\n")
    port = free_port()
    spec = {"port": port, "host": "127.0.0.1", "log_dir": str(tmp / "logs"), "stderr_limit": 1 << 20,
            "servers": [{"name": "filesystem", "command": sys.executable,
                         "args": [str(SERVER), "filesystem", str(ws)], "env": {},
                         "cwd": str(ws), "timeout_s": 30}]}  # fmt: skip
    (tmp / "spec.json").write_text(json.dumps(spec))
    proc = subprocess.Popen([sys.executable, str(SUPERVISOR), "serve", str(tmp / "spec.json")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{base}/status", timeout=2) as resp:
                    if json.load(resp)["filesystem"]["state"] == "ready":
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "supervisor not ready"
            time.sleep(0.1)
        yield base, tmp
    finally:
        proc.terminate()
        proc.wait(10)


def mcp_call(
    base: str, *args: str, stdin: str = "", urls: str | None = None
) -> subprocess.CompletedProcess[str]:
    default = f"filesystem={base}/filesystem/mcp"
    env = {**os.environ, "MCP_HTTP_URLS": default if urls is None else urls}
    return subprocess.run([sys.executable, str(MCP_CALL_SOURCE), *args], input=stdin, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_mcp_call_lists_and_calls_through_the_persistent_session(
    supervisor: tuple[str, Path],
) -> None:
    base, tmp = supervisor
    listed = mcp_call(base, "--list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[:3] == [
        "filesystem: 3 tools", "  list_directory(path?: string)",
        "      Entries of a directory of the workspace."]  # fmt: skip
    assert "  write_file(path: string, content: string)" in listed.stdout
    as_json = json.loads(mcp_call(base, "--list", "--json", "filesystem").stdout)
    assert [t["name"] for t in as_json["filesystem"]] == ["list_directory", "read_file",
                                                          "write_file"]  # fmt: skip
    read = mcp_call(base, "filesystem", "read_file", '{"path": "a.txt"}')
    assert (read.returncode, read.stdout) == (0, "hello from a.txt\n\n")
    wrote = mcp_call(base, "filesystem", "write_file", "-",
                     stdin=json.dumps({"path": "b.txt", "content": "из stdin"}))  # fmt: skip
    assert wrote.returncode == 0 and (tmp / "ws" / "b.txt").read_text() == "из stdin"
    full = json.loads(mcp_call(base, "--json", "filesystem", "list_directory").stdout)
    assert full["structuredContent"] == {"result": ["a.txt", "b.txt"]} and not full["isError"]
    # one server process served every call: its log names each request
    log = (tmp / "logs" / "filesystem.stderr.log").read_text()
    assert log.count("CallToolRequest") == 3


def test_mcp_call_exit_statuses(supervisor: tuple[str, Path]) -> None:
    base, _ = supervisor
    missing = mcp_call(base, "filesystem", "read_file", '{"path": "nope.txt"}')
    assert missing.returncode == 1 and "No such file" in missing.stdout
    assert "filesystem.read_file reported an error" in missing.stderr
    assert mcp_call(base, "filesystem", "no_such_tool").returncode == 1
    unknown = mcp_call(base, "nosuch", "read_file", "{}")
    assert unknown.returncode == 2 and "unknown server 'nosuch'; servers: filesystem" in \
        unknown.stderr  # fmt: skip
    assert mcp_call(base, "filesystem", "read_file", "[1]").returncode == 2
    assert mcp_call(base, "filesystem", "read_file", "{not json").returncode == 2
    assert mcp_call(base).returncode == 2 and mcp_call(base, "--help").returncode == 0
    assert mcp_call(base, "--list", urls="").returncode == 2
    dead = f"http://127.0.0.1:{free_port()}/gone/mcp"
    partial = mcp_call(base, "--list", urls=f"filesystem={base}/filesystem/mcp,gone={dead}")
    assert partial.returncode == 3 and "filesystem: 3 tools" in partial.stdout
    assert "gone: unavailable (" in partial.stdout
    assert mcp_call(base, "gone", "x", "{}", urls=f"gone={dead}").returncode == 3


def test_the_standard_library_probe_lists_the_served_tools(supervisor: tuple[str, Path]) -> None:
    """The probe the harness runs after starting the supervisor: standard library only (it
    never imports the ``mcp`` SDK), the tools listed through the served endpoint; a
    supervisor that does not answer is one ``failed`` entry, not a crash."""
    base, _ = supervisor
    probe = MCP_CALL_SOURCE.parent / "harness_mcp_probe.py"
    code = ("import runpy, sys; sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__'); "
            "assert not [m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')]")  # fmt: skip
    res = subprocess.run([sys.executable, "-c", code, str(probe), base, "--wait", "10"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["filesystem"]["state"] == "ready" and out["filesystem"]["tools"] == 3
    names = [t["name"] for t in out["filesystem"]["tool_list"]]
    assert "list_directory" in names and "write_file" in names
    assert out["filesystem"]["tool_list"][0]["description"]

    dead = subprocess.run([sys.executable, str(probe), f"http://127.0.0.1:{free_port()}",
                           "--wait", "0.5"], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert dead.returncode == 0, dead.stderr
    (entry,) = json.loads(dead.stdout).values()
    assert entry["state"] == "failed" and "not answering" in entry["error"]
