"""Issue 28 for ``--agent host-command`` (its gateway on a loopback port with a per-instance
token): a host agent's calls are recorded, then replayed with no upstream and no key to the
same bytes; the per-task limit stops the replay where it stopped the recording (a replay
spends the recorded cost against it, and reports $0); a changed prompt is a strict miss."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from benchmarks.programbench import FIXTURE_ID
from harness.testing.fake_model_server import start_fake_model_server
from tests.agents.model_scripts import step
from tests.model_proxy.support import tripwire as replay_tripwire
from tests.security.model_gateway_support import files_containing
from tests.support.suite import Run, run_pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]
TARGET = "benchmarks/programbench"
KEY = "sk-host-replay-0123456789abcdef"
PER_CALL = (1000 * 2.0 + 100 * 10.0) / 1e6

CALLER = r"""
import hashlib, json, os, urllib.error, urllib.request
base, token = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
for i in range(6):
    body = {"model": "fake-model",
            "messages": [{"role": "user", "content": f"step {i}" + os.environ.get("SUFFIX", "")}]}
    req = urllib.request.Request(base + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Authorization": "Bearer " + token,
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as resp:
            print("CALL", i, resp.status, hashlib.sha256(resp.read()).hexdigest(), flush=True)
    except urllib.error.HTTPError as exc:
        print("CALL", i, exc.code, json.loads(exc.read())["error"]["code"], flush=True)
"""


def host_run(tmp_path: Path, name: str, *extra: str, env: dict[str, str]) -> Run:
    caller = tmp_path / "caller.py"
    caller.write_text(CALLER)
    prices = tmp_path / "prices.json"
    prices.write_text(
        json.dumps({"models": {"fake-model": {"input_per_mtok": 2.0, "output_per_mtok": 10.0}}})
    )
    return run_pytest(
        TARGET,
        tmp_path / name,
        "--pb-fixtures",
        "-k",
        "calculator",
        "--agent",
        "host-command",
        "--agent-command",
        f"{sys.executable} {caller}",
        "--agent-env",
        "SUFFIX",
        "--solve-model",
        "fake-model",
        "--model-prices",
        str(prices),
        "--per-task-limit-usd",
        "0.01",
        *extra,
        env=env,
    )


def calls(run: Run) -> list[str]:
    row = run.latest[FIXTURE_ID]
    out = (run.root / row["output_paths"]["agent_stdout"]).read_text()
    return [line for line in out.splitlines() if line.startswith("CALL ")]


def test_a_host_agent_is_recorded_and_replayed_with_its_limit(tmp_path: Path) -> None:
    records = tmp_path / "records"
    server = start_fake_model_server({"responses": [step("ls -la")], "loop": True})
    try:
        rec = host_run(
            tmp_path,
            "record",
            "--model-upstream",
            server.base_url,
            "--model-record",
            str(records),
            env={"HARNESS_MODEL_API_KEY": KEY, "SUFFIX": ""},
        )
    finally:
        server.stop()
    assert rec.rc == 0, rec.out
    seen = calls(rec)
    assert [line.split()[2] for line in seen] == ["200"] * 4 + ["402"] * 2, seen
    assert server.requests == 4
    row = rec.latest[FIXTURE_ID]
    assert row["reason_code"] == "per_task_limit_reached"
    assert row["details"]["agent"]["model_record"]["calls"] == 4  # refusals reach no upstream
    assert files_containing(records, KEY.encode()) == []
    assert files_containing(records, b"harness-gw-") == []  # nor the instance's token

    tripwire = replay_tripwire(server, {"responses": [step("ls")], "loop": True})
    try:
        replay = host_run(tmp_path, "replay", "--model-replay", str(records), env={"SUFFIX": ""})
        strict = host_run(tmp_path, "strict", "--model-replay", str(records), env={"SUFFIX": "."})
    finally:
        tripwire.stop()
    assert replay.rc == 0, replay.out
    assert calls(replay) == seen  # the same bytes, and the limit at the same call
    again = replay.latest[FIXTURE_ID]
    assert again["reason_code"] == "per_task_limit_reached"
    assert again["cost_usd"] == 0.0 and again["details"]["agent"]["cost_source"] == "replay"
    assert again["details"]["agent"]["model_replay"]["original_cost_usd"] == pytest.approx(4 * PER_CALL)
    assert tripwire.requests == 0
    assert strict.rc == 0, strict.out
    missed = strict.latest[FIXTURE_ID]
    assert missed["reason_code"] == "replay_miss", missed
    assert [line.split()[2:] for line in calls(strict)] == [["409", "replay_miss"]] * 6
