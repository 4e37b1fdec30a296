"""``--agent host-command``: a script on the host solves the ProgramBench fixture through
``harness exec`` (the sandbox as the agent user, no Docker socket needed)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.fixture import ensure_fixture
from tests.support.suite import run_pytest

pytestmark = pytest.mark.docker
TARGET = "benchmarks/programbench"


def agent_script(path: Path) -> Path:
    files = ensure_fixture().oracle_contents()
    lines = ["set -eu",
             'test -n "$HARNESS_SANDBOX" && test -S "$HARNESS_EXEC_SOCKET"',
             'grep -q . "$HARNESS_INSTRUCTION_FILE"',
             'echo "user=$(harness exec -- id -un)"',
             'echo "pwd=$(harness exec pwd)"',
             "echo \"args=$(harness exec -- printf '%s,' a -- b)\"",
             'echo "model_key=${HARNESS_MODEL_API_KEY:-absent} named_len=${#AGENT_TEST_KEY}"']
    for rel, data in sorted(files.items()):
        lines.append(f"harness exec -- bash -c 'cat > {rel} && chmod 755 {rel}' <<'EOF'\n"
                     f"{data.decode()}EOF")
    lines += ['echo "sum=$(harness exec "bash compile.sh && ./executable 2 + 3")"',
              "set +e; harness exec --timeout 2 -- sleep 30; echo \"timeout_rc=$?\"",
              "harness exec -- sh -c 'exit 7'; echo \"exit_rc=$?\"; set -e",
              "echo '{\"cost_usd\": 0.25, \"prompt_tokens\": 40, \"completion_tokens\": 2}' "
              '> "$HARNESS_COST_FILE"']
    path.write_text("\n".join(lines) + "\n")
    return path


def test_host_command_agent_solves_the_fixture_through_harness_exec(tmp_path: Path) -> None:
    script = agent_script(tmp_path / "agent.sh")
    run = run_pytest(TARGET, tmp_path / "run", "--pb-fixtures", "-k", "calculator", "--agent", "host-command",
                     "--agent-command", f"bash {script}", "--agent-env", "AGENT_TEST_KEY",
                     env={"HARNESS_MODEL_API_KEY": "sk-planted-model-key-0123456789",
                          "AGENT_TEST_KEY": "named-agent-key-0123456789"})
    assert run.rc == 0, run.out
    row = run.latest[FIXTURE_ID]
    assert row["score"] == 1.0 and row["resolved"] is True, row
    out = (run.root / row["output_paths"]["agent_stdout"]).read_text()
    assert "user=agent" in out and "pwd=/workspace" in out and "sum=5" in out
    assert "args=a,--,b," in out  # only the leading -- ends harness exec's options
    assert "timeout_rc=124" in out and "exit_rc=7" in out
    # only named variables reach the host agent: the runner's model key does not
    assert "model_key=absent named_len=26" in out
    assert row["cost_usd"] == 0.25 and row["cost_known"] is True
    assert row["details"]["agent"]["cost_source"] == "agent_reported"
    assert row["tokens"] == {"prompt": 40, "completion": 2, "total": 42}


def test_harness_exec_outside_an_agent_refuses(tmp_path: Path) -> None:
    import subprocess

    env = {k: v for k, v in __import__("os").environ.items() if k != "HARNESS_EXEC_SOCKET"}
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "exec", "--", "true"],
                          capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and "HARNESS_EXEC_SOCKET" in proc.stderr


# A host agent that asks the model until it is refused, then tries a call without its
# token, and says what it can see of the provider key.
CALLER = r"""
import json, os, urllib.error, urllib.request
base, token = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
def call(key):
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "next"}]}
    req = urllib.request.Request(base + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json",
                                          "Authorization": "Bearer " + key})
    try:
        urllib.request.urlopen(req, timeout=30).read()
        return 200
    except urllib.error.HTTPError as exc:
        print("REFUSED", exc.code, exc.read().decode())
        return exc.code
calls = 0
while calls < 50 and call(token) == 200:
    calls += 1
print("CALLS", calls)
print("FOREIGN", call("sk-some-other-process"))
print("KEY", os.environ.get("HARNESS_MODEL_API_KEY", "absent"), base.startswith("http://127.0.0.1:"))
"""


def test_issue23_item5_a_host_agent_through_the_model_gateway_stops_at_the_limit(
        tmp_path: Path) -> None:
    """Before: ``--per-task-limit-usd`` was ignored for host agents. With
    ``--model-upstream`` the host agent's calls go through the gateway (a loopback port
    serving only its per-instance token): metered, and refused past the limit."""
    from harness.testing.fake_model_server import start_fake_model_server
    from tests.agents.model_scripts import step

    (tmp_path / "caller.py").write_text(CALLER)
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"models": {"fake-model": {"input_per_mtok": 2.0,
                                                            "output_per_mtok": 10.0}}}))
    upstream = start_fake_model_server({"responses": [step("ls -la")], "loop": True})
    try:
        run = run_pytest(TARGET, tmp_path / "run", "--pb-fixtures", "-k", "calculator",
                         "--agent", "host-command",
                         "--agent-command", f"{sys.executable} {tmp_path / 'caller.py'}",
                         "--model-upstream", upstream.base_url,
                         "--model-prices", str(prices), "--per-task-limit-usd", "0.01",
                         env={"HARNESS_MODEL_API_KEY": "sk-host-gateway-0123456789abcdef"})
    finally:
        upstream.stop()
    assert run.rc == 0, run.out  # scored: the agent's failure
    row = run.latest[FIXTURE_ID]
    assert row["outcome"] == "agent_failed" and row["reason_code"] == "per_task_limit_reached", row
    out = (run.root / row["output_paths"]["agent_stdout"]).read_text()
    assert "CALLS 4" in out and "REFUSED 402" in out and "per_task_limit_reached" in out, out
    assert "FOREIGN 401" in out  # no other local process can spend through it
    assert "KEY absent True" in out
    assert upstream.requests == 4  # refused calls never reach the provider
    assert row["cost_usd"] == pytest.approx(4 * 0.003) and row["cost_known"] is True
    assert row["details"]["agent"]["cost_source"] == "gateway"
    assert row["tokens"] == {"prompt": 4000, "completion": 400, "total": 4400}
    assert "sk-host-gateway" not in (run.root / "run_manifest.json").read_text()
