"""A host agent hunting the provider key in its parent's environment block (no Docker).

``--agent host-command --model-upstream``: the agent runs on the host as the runner's user.
The runner process started with the key in its environment block, and
``/proc/<runner>/environ`` keeps it whatever ``os.environ`` says. The runner makes itself
non-dumpable, so the kernel refuses that file to another non-root process of the same user.

The driver below is that runner process: it imports what it needs as root (the interpreter
lives under ``/root``), becomes an ordinary user (uid 65534, dumpable again, as any non-root
process is), builds the host agent with ``--model-upstream`` and runs an agent command that
walks its parent chain reading every ``environ``. Root bypasses the check, so the test
needs a root start to switch users; elsewhere it runs the driver as the current user.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.suite import REPO_ROOT

KEY = "sk-host-agent-victim-key-0123456789abcdef"
NOBODY = 65534

HUNT = r"""
echo "PARENT $PPID"
pid=$PPID; hops=0
while [ "$pid" -gt 1 ] && [ $hops -lt 6 ]; do
  if tr '\0' '\n' < /proc/$pid/environ 2>/dev/null | grep -q "^HARNESS_MODEL_API_KEY="; then
    echo "FOUND in $pid"
  elif [ -r /proc/$pid/environ ] || tr '\0' '\n' < /proc/$pid/environ >/dev/null 2>&1; then
    echo "READABLE $pid"
  else
    echo "DENIED $pid"
  fi
  pid=$(awk '{print $4}' /proc/$pid/stat); hops=$((hops+1))
done
"""

DRIVER = r"""
import ctypes, json, os, sys, types
from pathlib import Path
# everything the run needs is imported before the switch: /root is closed to other users
import harness.agents.command_proxy, harness.model_proxy.prices, harness.model_proxy.server
import harness.model_proxy.usage, harness.agents.host_exec, http.server, socketserver
import urllib.request, http.client, encodings.idna, subprocess, threading, secrets
import certifi, httpx
httpx.Client().close()  # loads the transport's modules
certifi.where = lambda: "/etc/ssl/certs/ca-certificates.crt"  # a CA file any user reads
from harness.agents.base import AgentOptions, AgentRequest
from harness.agents.host_command import HostCommandAgent, key_holder_protected

args = json.loads(sys.argv[1])
if os.getuid() == 0:
    os.setgroups([])
    os.setresgid(args["uid"], args["uid"], args["uid"])
    os.setresuid(args["uid"], args["uid"], args["uid"])
    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # an ordinary process is dumpable
os.environ.pop("HARNESS_MODEL_API_KEY")  # gone from os.environ, still in the block
if not args["isolated"]:  # the layer below: a machine that cannot make the namespaces
    import harness.agents.host_command as host_command
    host_command.isolation = lambda: "none: the test turns the namespaces off"
agent = HostCommandAgent.from_options(
    AgentOptions(command=args["command"], model_upstream="http://127.0.0.1:9/v1"),
    environ={"HARNESS_MODEL_API_KEY": args["key"], "PATH": os.environ["PATH"]})
print("PROTECTED", key_holder_protected(), flush=True)
out = Path(args["out"])
sandbox = types.SimpleNamespace(name="no-sandbox")
outcome = agent.run(AgentRequest(instance_id="i", instance_dir=out, instruction="find the key",
                                 sandbox=sandbox, timeout_sec=30))
print("AGENT", outcome.reason_code, flush=True)
print((out / "host_agent_stdout.log").read_text(), end="")
"""


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder the switched user can reach (pytest's own tmp folders are root's only)."""
    path = Path(tempfile.mkdtemp(prefix="key-holder-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("isolated", [True, False], ids=["namespace", "non-dumpable"])
def test_a_host_agent_cannot_read_the_key_from_its_parents_environment(
        open_dir: Path, isolated: bool) -> None:
    """Before: the runner process was dumpable and the agent read the key from
    ``/proc/$PPID/environ`` (``FOUND``). Now the agent's own PID namespace hides its parent
    altogether (``PARENT 0``); without the namespace, the runner's non-dumpable block is
    refused (``DENIED``)."""
    tmp_path = open_dir
    out = tmp_path / "instance"
    out.mkdir()
    hunt = tmp_path / "hunt.sh"
    hunt.write_text(HUNT)
    for path in (tmp_path, out, hunt):
        path.chmod(0o777)
    args = {"uid": NOBODY, "key": KEY, "out": str(out), "command": f"bash {hunt}",
            "isolated": isolated}
    env = {**os.environ, "HARNESS_MODEL_API_KEY": KEY,
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
           "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(tmp_path)}
    env.pop("PYTEST_CURRENT_TEST", None)
    done = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(args)], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "PROTECTED True" in lines, done.stdout
    assert "AGENT completed" in lines, done.stdout + done.stderr
    hunted = [line for line in lines if line.split(" ")[0] in ("FOUND", "READABLE", "DENIED")]
    if isolated:
        assert "PARENT 0" in lines and hunted == [], done.stdout  # no process above it
    else:
        assert hunted and hunted[0].startswith("DENIED"), done.stdout  # the runner's block
    assert not [line for line in hunted if line.startswith("FOUND")], done.stdout
    assert KEY not in done.stdout + done.stderr
