"""Two host-command agents at ``-n 2``, each hostile to the other (issue 40, class 4): each
learns the other's exec socket and pid (from a folder both can write) and tries to run a
command in the other's sandbox and to read the other's environment through ``/proc``.

Before, both worked: every exec socket trusted whoever could open it (every host agent is the
runner's user), and ``/proc/<pid>/environ`` of the other agent held its gateway token. Now
each agent runs in its own PID namespace (``harness.agents.host_isolation``): it sees no other
agent's process, and the other's socket refuses it (its peer is not in that namespace). A
reviewer then reached the other sandbox through the Docker socket (a root runner's agent owns
it); the agent's mount namespace now covers the engine's sockets and state, locked.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.support.suite import Suite

pytestmark = pytest.mark.docker

PROBE = r'''
import json, os, pathlib, socket, subprocess, time
meet = pathlib.Path({meet!r})
me = os.environ["HARNESS_INSTANCE_ID"]
(meet / f"{{me}}.json").write_text(json.dumps(
    {{"socket": os.environ["HARNESS_EXEC_SOCKET"], "pid": os.getpid(),
      "outer_pid": int(open("/proc/self/stat").read().split()[0])}}))
deadline = time.time() + 90
while time.time() < deadline:
    others = [p for p in meet.glob("*.json") if p.stem != me]
    if others:
        break
    time.sleep(0.1)
other_id = others[0].stem
other = json.loads(others[0].read_text())
out = {{"me": me, "other": other_id}}
try:
    s = socket.socket(socket.AF_UNIX)
    s.connect(other["socket"])
    s.sendall(json.dumps({{"argv": ["sh", "-c", f"echo {{me}} > /workspace/planted"]}}).encode()
              + b"\n")
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    out["other_socket"] = json.loads(data)
except OSError as exc:
    out["other_socket"] = {{"error": f"OSError: {{exc}}"}}
leaks = []
for entry in os.listdir("/proc"):
    if entry.isdigit():
        try:
            if f"HARNESS_INSTANCE_ID={{other_id}}".encode() in open(
                    f"/proc/{{entry}}/environ", "rb").read():
                leaks.append(entry)
        except OSError:
            pass
out["environ_leaks"] = leaks
try:  # the engine's socket: a root runner's agent owns it, and with it every sandbox
    d = socket.socket(socket.AF_UNIX)
    d.settimeout(5)
    d.connect("/run/docker.sock")
    d.sendall(b"GET /containers/json HTTP/1.0\r\n\r\n")
    out["docker_api"] = d.recv(200).decode(errors="replace")
except OSError as exc:
    out["docker_api"] = f"OSError: {{exc}}"
try:
    out["engine_state"] = os.listdir("/var/lib/docker")
except OSError as exc:
    out["engine_state"] = f"OSError: {{exc}}"
out["visible_processes"] = sum(1 for e in os.listdir("/proc") if e.isdigit())
mine = subprocess.run(["harness", "exec", "--", "sh", "-c",
                       "echo 42 > /workspace/answer.txt; ls -a /workspace"],
                      capture_output=True, text=True)
out["mine_rc"], out["workspace"] = mine.returncode, mine.stdout.split()
(meet / f"{{me}}.done").write_text("1")
while time.time() < deadline and not (meet / f"{{other_id}}.done").exists():
    time.sleep(0.1)
print("PROBE " + json.dumps(out))
'''


def test_two_host_agents_cannot_reach_each_other(tmp_path: Path) -> None:
    meet = tmp_path / "meet"
    meet.mkdir()
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE.format(meet=str(meet)))
    (tmp_path / "suite").mkdir()
    suite = Suite(tmp_path / "suite")
    suite.tasks([{"id": "apart", "work": "agent", "count": 2, "timeout": 180}])
    run = suite.run("-n", "2", "--agent", "host-command", "--agent-command",
                    f"{sys.executable} {probe}", timeout=300)
    assert run.rc == 0, run.out
    probes = {}
    for iid, row in run.latest.items():
        text = (run.root / row["output_paths"]["agent_stdout"]).read_text()
        probes[iid] = json.loads(next(x for x in text.splitlines()
                                      if x.startswith("PROBE "))[6:])
        assert row["resolved"] is True, row
        assert row["details"]["agent"]["details"]["host_isolation"] == "pid_namespace", row
        assert row["details"]["agent"]["details"]["exec_refused"] == 1, row  # the other's one try
    assert len(probes) == 2
    for out in probes.values():
        reply = out["other_socket"]
        assert reply.get("exit_code") is None and "refused" in reply["error"], out
        assert out["environ_leaks"] == [], out  # the other's environment is out of sight
        assert out["visible_processes"] < 10, out  # its own namespace: a handful
        assert out["docker_api"].startswith("OSError"), out  # the engine's socket is covered
        assert out["engine_state"] == [] or out["engine_state"].startswith("OSError"), out
        assert out["mine_rc"] == 0 and "planted" not in out["workspace"], out
