"""``harness exec`` against a hostile host agent: the exec socket runs commands only as
the agent user in its own sandbox; a request asking for root, another user, a privileged
flag or a different container is refused as a bad request."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from benchmarks.programbench import FIXTURE_ID
from tests.support.suite import run_pytest

pytestmark = pytest.mark.docker
TARGET = "benchmarks/programbench"

PROBE = r'''
import json, os, socket, subprocess
def ask(req):
    s = socket.socket(socket.AF_UNIX)
    s.connect(os.environ["HARNESS_EXEC_SOCKET"])
    s.sendall(json.dumps(req).encode() + b"\n")
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return json.loads(data)
out = {}
for name, extra in {"user": {"user": "root"}, "privileged": {"privileged": True},
                    "container": {"container": "other"}, "env": {"env": {"A": "1"}}}.items():
    out[name] = ask({"argv": ["id", "-u"], **extra})
uid = subprocess.run(["harness", "exec", "--", "id", "-u"], capture_output=True, text=True)
out["uid"] = uid.stdout.strip()
root_read = subprocess.run(["harness", "exec", "--", "cat", "/etc/shadow"],
                           capture_output=True, text=True)
out["shadow_rc"] = root_read.returncode
print("PROBE " + json.dumps(out))
'''


def test_exec_socket_runs_only_as_the_agent_user(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    run = run_pytest(TARGET, tmp_path / "run", "--pb-fixtures", "-k", "calculator", "--agent", "host-command",
                     "--agent-command", f"{sys.executable} {probe}")
    assert run.rc == 0, run.out
    row = run.latest[FIXTURE_ID]
    text = (run.root / row["output_paths"]["agent_stdout"]).read_text()
    out = json.loads(next(x for x in text.splitlines() if x.startswith("PROBE "))[6:])
    for name in ("user", "privileged", "container", "env"):
        assert out[name]["exit_code"] is None and "bad request" in out[name]["error"], out
    assert out["uid"] not in ("", "0")
    assert out["shadow_rc"] != 0
