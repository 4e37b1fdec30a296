"""The model gateway against an in-sandbox agent: it finishes the fixture through the
gateway with the real OpenAI SDK (streaming), yet finds the provider key nowhere (its
environment, readable files, any process's environment or arguments), has no route to
anything but the gateway, and the run root holds no copy of the key either."""

from __future__ import annotations

import hashlib
import json
import secrets
import subprocess
from pathlib import Path

import docker
import pytest

from benchmarks.programbench import FIXTURE_ID
from harness.testing.fake_model_server import start_fake_model_server
from tests.agents.model_scripts import solve_script
from tests.security.model_gateway_support import (
    AGENT_COMMAND,
    SdkInjector,
    agent_report,
    files_containing,
)
from tests.support.suite import run_pytest

pytestmark = pytest.mark.docker
TARGET = "benchmarks/programbench"


def host_addresses() -> list[str]:
    """Every IPv4 address of this host but loopback (docker0's included)."""
    out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True,
                         check=True).stdout
    addrs = [line.split()[3].split("/")[0] for line in out.splitlines()]
    return [a for a in addrs if not a.startswith("127.")]


@pytest.mark.slow  # one of the default tier's longest (durations.json); CI runs it in the slow tier
def test_in_sandbox_sdk_agent_solves_through_the_gateway_without_the_key(tmp_path: Path) -> None:
    key = "sk-harness-test-" + secrets.token_hex(16)
    cost_per_call = 0.00125
    script = solve_script(cost=cost_per_call)
    steps = len(script["responses"])
    # bound on every address: if the sandbox had any route to the host, it would answer
    upstream = start_fake_model_server(script, host="0.0.0.0", log=tmp_path / "upstream.jsonl")
    port = upstream.server.server_address[1]
    params = {"key_parts": [key[:10], key[10:]], "model": "fake-model", "stream": True,
              "probe": True, "max_steps": 20,
              "outbound": [["model-gateway", 8080], ["8.8.8.8", 53], ["1.1.1.1", 443],
                           ["127.0.0.1", port], *[[a, port] for a in host_addresses()]]}
    root = tmp_path / "run"
    try:
        with SdkInjector(root, params) as injector:
            run = run_pytest(TARGET, root, "--pb-fixtures", "-k", "calculator", "--agent", "command",
                             "--agent-command", AGENT_COMMAND,
                             "--model-upstream", f"http://127.0.0.1:{port}/v1",
                             env={"HARNESS_MODEL_API_KEY": key})
    finally:
        upstream.stop()
    assert run.rc == 0, run.out
    assert len(injector.injected) == 1, injector.error
    row = run.latest[FIXTURE_ID]
    report = agent_report((run.root / row["output_paths"]["agent_stdout"]).read_text())
    assert report["status"] == "submitted" and report["steps"] == steps, report
    assert row["score"] == 1.0 and row["resolved"] is True, row
    # the key is nowhere in the sandbox
    assert report["base_url_is_gateway"] is True
    assert report["env_has_key"] is False
    assert report["proc_with_key"] == [] and report["files_with_key"] == []
    # no route out but the gateway
    out = report["outbound"]
    assert out.pop("model-gateway:8080") == "connected"
    assert all(v.startswith("failed") for v in out.values()), out
    # the usage chunk the gateway asked for is not shown to a client that did not ask
    assert "saw_usage_chunk" not in report
    # the upstream saw only the real key, never the sandbox's placeholder
    calls = [json.loads(x) for x in (tmp_path / "upstream.jsonl").read_text().splitlines()]
    assert len(calls) == steps and all(c["stream"] for c in calls)
    want = hashlib.sha256(f"Bearer {key}".encode()).hexdigest()
    assert {c["auth_sha256"] for c in calls} == {want}
    # metered by the gateway from the provider's cost field
    assert row["cost_known"] is True and row["details"]["agent"]["cost_source"] == "gateway"
    assert row["cost_usd"] == pytest.approx(steps * cost_per_call)
    assert row["tokens"] == {"prompt": 1000 * steps, "completion": 100 * steps,
                             "total": 1100 * steps}
    usage = json.loads((run.root / row["output_paths"]["model_gateway"]).read_text())
    assert usage["calls"] == steps and usage["priced_by_provider"] == steps
    # nothing in the run root holds the key (manifest, rows, logs, agent output)
    assert files_containing(run.root, key.encode()) == []
    client = docker.from_env()
    label = f"harness.run={run.manifest['run_id']}"
    assert client.containers.list(all=True, filters={"label": label}) == []
    assert client.networks.list(filters={"label": label}) == []


def test_gateway_refuses_to_hand_its_key_to_the_sandbox(tmp_path: Path) -> None:
    run = run_pytest(TARGET, tmp_path / "run", "--pb-fixtures", "-k", "calculator", "--agent", "command",
                     "--agent-command", "true", "--model-upstream", "http://127.0.0.1:9/v1",
                     "--agent-env", "HARNESS_MODEL_API_KEY",
                     env={"HARNESS_MODEL_API_KEY": "sk-x-" + secrets.token_hex(8)})
    assert run.rc == 2, run.out
    run.result.stdout.fnmatch_lines(["*--agent-env HARNESS_MODEL_API_KEY: that is the gateway's provider key;"
                                     " the agent never gets it (drop the option)*"])
