"""The seed inside the container (issue 26 point 1), on Docker: ``--agent command
--agent-repo DIR --agent-command CMD --model-upstream URL`` on the Cowork fixture.

The agent is a small program in a git checkout made by the test. The harness copies the
checkout into the agent container (``$HARNESS_AGENT_REPO``, read-only) and runs CMD there;
the program asks the scripted FAKE model through the model gateway's relay on the task's
internal network (the key stays in the harness), calls the task's MCP tool through
``$MCP_CLIENT_CONFIG`` as the model told it, and the real checker passes the task. It also
asks a model it may not use (403, nothing reaches the upstream) and an allowed helper. On a
second task the same program keeps asking until the per-task limit refuses it (402): the
agent's failure ``per_task_limit_reached``. The provider key is in nothing the agent could
read (its environment, every process's environment and command line) and in no file of the
run root; nothing labelled is left.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.cowork_bench.seed import SEED_PATH
from harness.testing.fake_model_server import start_fake_model_server
from tests.benchmarks.cowork.cowork_helpers import FIXTURE
from tests.benchmarks.cowork.cowork_seed_support import files_holding, labelled, make_repo
from tests.support.suite import run_pytest

pytestmark = pytest.mark.docker

TARGET = "benchmarks/cowork_bench"
SOLVED, LIMITED = "gcal-standup-week", "email-reply-invoice"
KEY = "sk-cowork-seed-8c1d4e2f7a9b3c5d"
COST = 0.004  # per model call; the limit (0.01) lets three through
DAYS = ("2026-03-03", "2026-03-04", "2026-03-05")

AGENT = r'''"""A small agent: asks the model, calls the MCP tool the model names, reports what it saw."""
import glob, json, os, urllib.error, urllib.request

BASE, TASK, SEED = (os.environ[n] for n in ("OPENAI_BASE_URL", "HARNESS_INSTANCE_ID",
                                            "HARNESS_AGENT_REPO"))


def ask(model):
    text = open(os.environ["HARNESS_INSTRUCTION_FILE"]).read()
    body = {"model": model, "messages": [{"role": "user", "content": text}]}
    req = urllib.request.Request(BASE + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json",
                                          "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


print("SEED", os.path.dirname(os.path.abspath(__file__)), open(SEED + "/VERSION").read().strip())
try:
    open(SEED + "/mine.txt", "w").close()
    print("SEED writable")
except OSError:
    print("SEED read-only")
if TASK == "gcal-standup-week":
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    status, reply = ask("fake-model")
    plan = json.loads(reply["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])
    server = json.load(open(os.environ["MCP_CLIENT_CONFIG"]))["mcpServers"][plan["server"]]

    async def act():
        params = StdioServerParameters(command=server["command"], args=server["args"])
        async with stdio_client(params) as (r, w), ClientSession(r, w) as session:
            await session.initialize()
            for args in plan["calls"]:
                res = await session.call_tool(plan["tool"], args)
                print("MCP", plan["tool"], res.isError, res.content[0].text)

    anyio.run(act)
    print("PIN", ask("other-model")[0], ask("helper-model")[0])
else:
    codes = []
    while len(codes) < 10 and (not codes or codes[-1] == 200):
        codes.append(ask("fake-model")[0])
    print("LIMIT", codes)
print("ROUTE", BASE.startswith("http://model-gateway:8080/"))
print("ENV", json.dumps(dict(os.environ)))
for path in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline"):
    try:
        print("PROC", path, open(path, "rb").read().replace(b"\0", b" ").decode("utf-8", "replace"))
    except OSError:
        pass
'''


def model_script() -> dict[str, object]:
    calls = [{"summary": "Daily standup", "start": f"{d}T09:30:00+00:00",
              "end": f"{d}T09:45:00+00:00"} for d in DAYS]  # fmt: skip
    tool = {"name": "mcp", "arguments": {"server": "google_calendar", "tool": "create_event",
                                         "calls": calls}}  # fmt: skip
    return {"model": "fake-model", "loop": True, "responses": [
        {"content": "Creating the three standups.", "tool_calls": [tool],
         "usage": {"prompt_tokens": 800, "completion_tokens": 80, "cost": COST}}]}  # fmt: skip


@pytest.mark.slow  # one of the default tier's longest (durations.json); CI runs it in the slow tier
def test_the_seed_runs_in_the_container_with_the_model_gateway_and_the_task_tools(
    tmp_path: Path,
) -> None:
    seed = tmp_path / "agent-seed"
    head = make_repo(seed, {"agent.py": AGENT, "VERSION": "seed-0.1\n", "README.md": "an agent\n"})
    model = start_fake_model_server(model_script())
    try:
        run = run_pytest(
            TARGET, tmp_path / "run", "--cowork-root", str(FIXTURE), "--cowork-allow-dirty-bench",
            "--instance", SOLVED, "--instance", LIMITED, "--agent", "command",
            "--agent-repo", str(seed),
            "--agent-command", '/opt/venv/bin/python3 "$HARNESS_AGENT_REPO/agent.py"',
            "--model-upstream", model.base_url, "--solve-model", "fake-model",
            "--allow-model", "helper-model", "--per-task-limit-usd", "0.01",
            env={"HARNESS_MODEL_API_KEY": KEY}, timeout=600)  # fmt: skip
    finally:
        model.stop()
    assert run.manifest["extra"]["agent_source"]["head"] == head
    # calls that reached the scripted upstream: 2 (solved: the plan, the helper) + 3 (limited)
    assert model.requests == 5, run.out
    solved, limited = run.latest[SOLVED], run.latest[LIMITED]

    out = (run.root / solved["output_paths"]["agent_stdout"]).read_text()
    assert f"SEED {SEED_PATH} seed-0.1" in out and "SEED read-only" in out, out[-3000:]
    assert out.count("MCP create_event False") == 3, out[-3000:]
    assert "PIN 403 200" in out  # another model refused; the helper allowed
    assert (solved["status"], solved["resolved"]) == ("passed", True), solved
    copied = solved["details"]["cowork_bench"]["agent_seed"]
    assert copied["commit"] == head and copied["path"] == SEED_PATH and copied["files"] == 3
    record = json.loads((run.root / solved["output_paths"]["agent_seed"]).read_text())
    assert record["tar_sha256"] == copied["tar_sha256"] and record["dirty"] is False
    models = {m["model"]: m for m in solved["models"]}
    assert models["fake-model"]["allowed"] and models["helper-model"]["allowed"]
    assert models["other-model"]["allowed"] is False and models["other-model"]["refused"] == 1
    assert solved["cost_usd"] == pytest.approx(2 * COST) and solved["cost_known"] is True

    out = (run.root / limited["output_paths"]["agent_stdout"]).read_text()
    assert "LIMIT [200, 200, 200, 402]" in out, out[-2000:]
    assert limited["reason_code"] == "per_task_limit_reached", limited
    assert limited["resolved"] is not True and limited["infra"] is False
    assert limited["cost_usd"] == pytest.approx(3 * COST)

    for row in (solved, limited):  # the key: not in what the agent could read
        stdout = (run.root / row["output_paths"]["agent_stdout"]).read_text()
        assert "PROC /proc/" in stdout and "ROUTE True" in stdout and KEY not in stdout
    assert files_holding(run.root, KEY.encode()) == []  # nor anywhere in the run root
    assert labelled(run.manifest["run_id"]) == []  # relays, containers, networks: gone
