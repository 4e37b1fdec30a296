"""The model gateway's money: the per-task limit stops an in-sandbox agent that keeps
calling (a refusal the agent sees; the row says ``per_task_limit_reached``), the row's
cost is the scripted usage times the given prices, and a campaign of two such runs
settles to exactly their sum."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from benchmarks.programbench import FIXTURE_ID
from harness.testing.fake_model_server import start_fake_model_server
from tests.agents.model_scripts import step
from tests.security.model_gateway_support import (
    AGENT_COMMAND,
    SdkInjector,
    agent_report,
    fake_model_prices,
)
from tests.support.suite import run_pytest

pytestmark = pytest.mark.docker
TARGET = "benchmarks/programbench"
KEY = "sk-budget-test-0123456789abcdef"
PER_CALL = (1000 * 2.0 + 100 * 10.0) / 1e6  # 1000 prompt + 100 completion tokens
LIMIT = 0.01  # four calls fit under it (0.009 < 0.01), the fifth is refused


def gateway_run(tmp_path: Path, name: str, upstream_url: str, *extra: str):
    prices = fake_model_prices(tmp_path)
    params = {"key_parts": [KEY], "model": "fake-model", "stream": False, "max_steps": 50}
    root = tmp_path / name
    with SdkInjector(root, params):
        return run_pytest(TARGET, root, "--pb-fixtures", "-k", "calculator",
                          "--agent", "command",
                          "--agent-command", AGENT_COMMAND, "--model-upstream", upstream_url,
                          "--model-prices", str(prices), "--per-task-limit-usd", str(LIMIT),
                          *extra, env={"HARNESS_MODEL_API_KEY": KEY})


def test_per_task_limit_stops_the_agent_and_the_campaign_settles_exactly(
        tmp_path: Path) -> None:
    upstream = start_fake_model_server({"responses": [step("ls -la")], "loop": True})
    campaign = tmp_path / "campaign.json"
    budget = ("--campaign-file", str(campaign), "--campaign-budget-usd", "5",
              "--per-task-reserve-usd", "1", "--unknown-cost-allowance-usd", "1")
    try:
        runs = [gateway_run(tmp_path, f"r{i}", upstream.base_url, *budget) for i in (1, 2)]
    finally:
        upstream.stop()
    for run in runs:
        assert run.rc == 0, run.out
        row = run.latest[FIXTURE_ID]
        assert row["outcome"] == "agent_failed", row
        assert row["reason_code"] == "per_task_limit_reached"
        report = agent_report((run.root / row["output_paths"]["agent_stdout"]).read_text())
        assert report["refused"]["status"] == 402 and "per_task_limit_reached" in \
            report["refused"]["body"]
        assert report["steps"] == 4
        assert row["cost_known"] is True and row["details"]["agent"]["cost_source"] == "gateway"
        assert row["cost_usd"] == pytest.approx(4 * PER_CALL, abs=1e-12)
        assert row["tokens"] == {"prompt": 4000, "completion": 400, "total": 4400}
        assert row["details"]["budget"]["charged_usd"] == pytest.approx(4 * PER_CALL, abs=1e-12)
        usage = json.loads((run.root / row["output_paths"]["model_gateway"]).read_text())
        assert usage["calls"] == 4 and usage["refused"] == 1 and usage["priced_by_table"] == 4
    assert upstream.requests == 8  # the refused calls never reached the provider
    state = json.loads(campaign.read_text())
    assert state["settled_usd"] == pytest.approx(8 * PER_CALL, abs=1e-12)
    assert state["spent_usd"] == pytest.approx(8 * PER_CALL, abs=1e-12)
    assert state["outstanding_usd"] == pytest.approx(0.0, abs=1e-12)


def test_issue23_item5_a_gateway_task_is_cancelled_at_the_per_task_limit(
        tmp_path: Path) -> None:
    """Before: ``--per-task-limit-usd`` was ignored for ``--agent gateway``. The task's
    spend (its status' cost and its ``llm_usage`` events) reaches the limit: the harness
    cancels it; the row is the agent's failure ``per_task_limit_reached``, scored."""
    from tests.agents.agents_support import start_server

    steps = [{"run": "true", "sleep_s": 0.3, "cost_usd": 0.2, "prompt_tokens": 100,
              "completion_tokens": 10} for _ in range(30)]
    server = start_server(tmp_path / "server", {"default_plan": {"steps": steps},
                                                "docker_user": "agent"})
    try:
        run = run_pytest(TARGET, tmp_path / "run", "--pb-fixtures", "-k", "calculator",
                         "--agent", "gateway", "--gateway-url", server.url,
                         "--gateway-poll-sec", "0.1", "--per-task-limit-usd", "0.5")
        state = httpx.get(f"{server.url}/api/state", timeout=5, trust_env=False).json()
    finally:
        server.stop()
    assert run.rc == 0, run.out  # scored: the agent's failure, not infrastructure
    row = run.latest[FIXTURE_ID]
    assert row["outcome"] == "agent_failed" and row["reason_code"] == "per_task_limit_reached", row
    assert row["official_eval_status"] == "completed"
    task = row["details"]["agent"]["task_id"]
    assert state["cancels"] == [task] and state["tasks"][task] == "cancelled"
    # stopped at the first poll past the limit: a few steps, far from all 30
    assert 0.5 <= row["cost_usd"] <= 1.2, row
    assert row["details"]["agent"]["details"]["per_task_limit_reached"].startswith("spent $")


def test_issue23_item5_kinds_whose_spend_is_invisible_refuse_the_limit(tmp_path: Path) -> None:
    for name, agent in (("cmd", ("--agent", "command", "--agent-command", "true")),
                        ("host", ("--agent", "host-command", "--agent-command", "true"))):
        run = run_pytest(TARGET, tmp_path / name, "--pb-fixtures", "-k", "calculator", *agent,
                         "--per-task-limit-usd", "1")
        assert run.rc == 2, run.out
        kind = agent[1]
        run.result.stdout.fnmatch_lines([f"*--per-task-limit-usd cannot be enforced for agent kind '{kind}'*"])
        assert not list((tmp_path / name).glob("programbench/*/"))  # no instance ran


def test_issue23_item5_a_gateway_task_with_unmetered_spend_is_stopped_under_a_limit(
        tmp_path: Path) -> None:
    """The server says the task spends what it cannot meter: under a limit that is spend
    the limit cannot bound, so the task is cancelled (as the model gateway refuses calls
    after an unpriceable one)."""
    from tests.agents.agents_support import start_server

    steps = [{"run": "true", "sleep_s": 0.3, "cost_usd": 0.01},
             {"run": "true", "sleep_s": 0.3, "cost_known": False},
             *[{"run": "true", "sleep_s": 0.3, "cost_usd": 0.01} for _ in range(30)]]
    server = start_server(tmp_path / "server", {"default_plan": {"steps": steps},
                                                "docker_user": "agent"})
    try:
        run = run_pytest(TARGET, tmp_path / "run", "--pb-fixtures", "-k", "calculator",
                         "--agent", "gateway", "--gateway-url", server.url,
                         "--gateway-poll-sec", "0.1", "--per-task-limit-usd", "5")
        state = httpx.get(f"{server.url}/api/state", timeout=5, trust_env=False).json()
    finally:
        server.stop()
    assert run.rc == 0, run.out
    row = run.latest[FIXTURE_ID]
    assert row["reason_code"] == "per_task_limit_reached", row
    assert row["details"]["agent"]["details"]["per_task_limit_reached"].startswith("cost_unknown")
    assert state["cancels"] == [row["details"]["agent"]["task_id"]]
    assert row["cost_known"] is False  # charged by the campaign as unknown, never $0
