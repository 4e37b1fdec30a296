"""Scenario (issue 23 item 4): a command agent inside a Cowork agent container reaches the
model through the metering model gateway (``--agent command --model-upstream``).

The model is the scripted FAKE model server on the host (it counts the calls); the agent is
a few lines of Python in the container that asks the model once (``$OPENAI_BASE_URL``, the
relay on the task's internal network) and runs the bash tool call it gets back, which
writes the task's rows. The real checker of ``cowork_mini`` scores it; the provider key is
nowhere the agent can read (its environment, every process's environment and command line)
and nowhere in the run root; the relay leaves nothing labelled behind.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import docker
import pytest

from harness.testing.fake_model_server import start_fake_model_server
from tests.benchmarks.cowork.cowork_agent_scripts import SCRIPTS
from tests.benchmarks.cowork.cowork_helpers import FIXTURE
from tests.support.suite import run_pytest

pytestmark = pytest.mark.docker

TARGET = "benchmarks/cowork_bench"
IID = "gcal-standup-week"
KEY = "sk-cowork-route-5b8e0f1d2c3a4b6e"

# The in-container agent: one model call, then the bash tool call it answered with; then
# what it can see of processes (environments, command lines), for the test to search.
AGENT = r"""
import glob, json, os, subprocess, urllib.request
base = os.environ["OPENAI_BASE_URL"]
body = {"model": "fake-model", "messages": [{"role": "user", "content": "solve the task"}]}
req = urllib.request.Request(base + "/chat/completions", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json",
                                      "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
reply = json.load(urllib.request.urlopen(req, timeout=60))
call = reply["choices"][0]["message"]["tool_calls"][0]["function"]
command = json.loads(call["arguments"])["command"]
done = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
print("TOOL", done.returncode, done.stdout.strip(), done.stderr.strip()[-500:])
print("BASE", base)
print("ROUTE", base.startswith("http://model-gateway:8080/"))
import socket
try:  # the relay is the only way out: no route to the internet
    socket.create_connection(("1.1.1.1", 443), timeout=3).close()
    print("DIRECT reachable")
except OSError as exc:
    print("DIRECT blocked", type(exc).__name__)
print("ENV", json.dumps(dict(os.environ)))
for path in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline"):
    try:
        print("PROC", path, open(path, "rb").read().replace(b"\0", b" ").decode("utf-8", "replace"))
    except OSError:
        pass
"""


def labelled(run_id: str) -> list[str]:
    client = docker.from_env()
    flt = {"label": f"harness.run={run_id}"}
    return [c.name for c in client.containers.list(all=True, filters=flt)] + [
        n.name for n in client.networks.list(filters=flt)]


def files_holding(root: Path, needle: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and not p.is_symlink()
            and needle in p.read_bytes()]


def test_a_command_agent_in_a_cowork_container_reaches_the_scripted_model(tmp_path: Path) -> None:
    tool = {"name": "bash", "arguments": {"command": f"python3 -c {shlex.quote(SCRIPTS[IID])}"}}
    model = start_fake_model_server({"model": "fake-model", "responses": [
        {"content": "I will write the events.", "tool_calls": [tool],
         "usage": {"prompt_tokens": 700, "completion_tokens": 70, "cost": 0.0035}}]})
    root = tmp_path / "run"
    try:
        run = run_pytest(TARGET, root, "--cowork-root", str(FIXTURE), "--cowork-allow-dirty-bench",
                         "--instance", IID, "--agent", "command",
                         "--agent-command", f"python3 -c {shlex.quote(AGENT)}",
                         "--model-upstream", model.base_url,
                         env={"HARNESS_MODEL_API_KEY": KEY}, timeout=600)
    finally:
        model.stop()
    assert run.rc == 0, run.out
    run.result.stdout.no_fnmatch_line("*AttributeError*")
    row = run.latest[IID]
    assert model.requests == 1  # the fake model server counted the agent's one call
    stdout = (run.root / row["output_paths"]["agent_stdout"]).read_text()
    assert "TOOL 0 created 3 events" in stdout, stdout[-2000:]
    assert "ROUTE True" in stdout  # the relay's alias on the task network
    assert "DIRECT blocked" in stdout  # and nothing else: the task network is internal
    # scored by the real checker: the model's tool call wrote the rows
    assert (row["status"], row["resolved"]) == ("passed", True), row
    assert row["details"]["agent"]["cost_source"] == "gateway" and row["cost_known"] is True
    assert row["tokens"]["prompt"] == 700 and row["tokens"]["completion"] == 70
    assert row["paid_activity"] is True
    assert row["details"]["cowork_bench"]["paid_activity"] == "observed"
    usage = json.loads((run.root / row["output_paths"]["model_gateway"]).read_text())
    assert usage["calls"] == 1
    # the key: not in what the agent could read, not anywhere in the run root
    assert "PROC /proc/" in stdout and KEY not in stdout
    assert files_holding(run.root, KEY.encode()) == []
    assert labelled(run.manifest["run_id"]) == []  # the relay went with the instance
