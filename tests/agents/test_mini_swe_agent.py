"""``--agent mini-swe-agent``: the real mini-swe-agent package drives the ProgramBench
fixture's sandbox through a FAKE scripted model server, scored by the official eval; its
row lists the model litellm called (issue 24) and the loop's steps."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from benchmarks.programbench import FIXTURE_ID
from harness.testing.fake_model_server import start_fake_model_server
from tests.agents.model_scripts import partial_script, solve_script
from tests.support.suite import run_pytest

# slow tier: end-to-end Docker runs of a minute or more together (CI runs the tier after
# the default one, which stays under its 10 minutes)
pytestmark = [pytest.mark.docker, pytest.mark.slow]
TARGET = "benchmarks/programbench"
MODEL = "openai/fake-model"


def agent_config(path: Path, base_url: str, **agent: object) -> Path:
    cfg = {"model": {"model_kwargs": {"api_base": base_url, "api_key": "not-a-key"}},
           "agent": agent}
    path.write_text(yaml.safe_dump(cfg))
    return path


def prices(path: Path) -> Path:
    path.write_text(json.dumps({"models": {"fake-model": {"input_per_mtok": 2.0,
                                                          "output_per_mtok": 10.0}}}))
    return path


def test_mini_swe_agent_solves_the_fixture(tmp_path: Path) -> None:
    server = start_fake_model_server(solve_script(), log=tmp_path / "requests.jsonl")
    try:
        run = run_pytest(TARGET, tmp_path / "run", "--pb-fixtures", "-k", "calculator",
                         "--agent", "mini-swe-agent", "--solve-model", MODEL,
                         "--agent-config", str(agent_config(tmp_path / "c.yaml", server.base_url)),
                         "--model-prices", str(prices(tmp_path / "p.json")))
    finally:
        server.stop()
    assert run.rc == 0, run.out
    row = run.latest[FIXTURE_ID]
    assert row["score"] == 1.0 and row["resolved"] is True, row
    steps = len(solve_script()["responses"])
    assert row["details"]["agent"]["details"]["steps"] == steps
    assert row["details"]["agent"]["details"]["exit_status"] == "Submitted"
    assert row["tokens"] == {"prompt": 1000 * steps, "completion": 100 * steps,
                             "total": 1100 * steps}
    assert row["cost_known"] is True
    assert row["cost_usd"] == pytest.approx(steps * (1000 * 2.0 + 100 * 10.0) / 1e6)
    assert row["details"]["agent"]["cost_source"] == "agent_reported"
    traj = json.loads((run.root / row["output_paths"]["trajectory"]).read_text())
    assert traj["info"]["mini_version"] == "2.4.6"
    assert traj["info"]["exit_status"] == "Submitted"
    # the leaderboard's system prompt, from the pinned package's programbench.yaml
    assert "reverse-engineering benchmark" in traj["messages"][0]["content"]
    requests = [json.loads(x) for x in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert len(requests) == steps and requests[0]["tools"] == ["bash"]
    # Issue 24: the row lists the model litellm actually called (the response's own name,
    # source ``mini_swe``) with its calls, tokens and cost, and its steps.
    assert {r["model"] for r in requests} == {"fake-model"}  # what litellm sent
    per_call = (1000 * 2.0 + 100 * 10.0) / 1e6
    assert len(row["models"]) == 1
    called = row["models"][0]
    # the provider answered as "fake-model" (litellm's resolved name, not "openai/...")
    assert {k: v for k, v in called.items() if k != "cost_usd"} == {
        "model": "fake-model", "source": "mini_swe", "calls": steps, "refused": 0,
        "prompt_tokens": 1000 * steps, "completion_tokens": 100 * steps, "allowed": True}
    assert called["cost_usd"] == pytest.approx(steps * per_call)
    assert called["cost_usd"] == pytest.approx(row["cost_usd"])
    assert row["steps"] == steps  # top level, as the loop counted them
    record = json.loads((run.root / row["output_paths"]["agent_record"]).read_text())
    assert record["steps"] == steps and record["models"] == row["models"]


def test_mini_swe_agent_step_limit_is_an_agent_failure(tmp_path: Path) -> None:
    server = start_fake_model_server(partial_script())
    try:
        run = run_pytest(TARGET, tmp_path / "run", "--pb-fixtures", "-k", "calculator",
                         "--agent", "mini-swe-agent", "--solve-model", MODEL,
                         "--agent-config",
                         str(agent_config(tmp_path / "c.yaml", server.base_url, step_limit=4)),
                         "--model-prices", str(prices(tmp_path / "p.json")))
    finally:
        server.stop()
    assert run.rc == 0, run.out  # scored, not an infrastructure failure
    row = run.latest[FIXTURE_ID]
    assert row["outcome"] == "agent_failed" and row["reason_code"] == "step_limit_reached", row
    assert row["score"] == 0.0 and row["official_eval_status"] == "completed"
    assert row["details"]["agent"]["details"]["steps"] == 4 and row["steps"] == 4
    assert row["tokens"]["prompt"] == 4000
    assert row["cost_known"] is True and row["details"]["agent"]["cost_source"] == "agent_reported"
    assert row["cost_usd"] == pytest.approx(4 * (1000 * 2.0 + 100 * 10.0) / 1e6)
    sub = run.root / row["output_paths"]["submission"]
    assert sub.is_file()


@pytest.mark.docker
def test_litellm_stays_off_the_collection_path_and_bad_configs_refuse(tmp_path: Path) -> None:
    import subprocess

    code = (
        "import sys\n"
        "from harness.agents.base import make_agent\n"
        "a = make_agent('mini-swe-agent', {'solve_model': 'openai/x'})\n"
        "assert a.config['agent']['step_limit'] == 1000, a.config['agent']\n"
        "assert a.config['environment']['timeout'] == 180\n"
        "print(sorted(m for m in ('litellm', 'minisweagent', 'openai') if m in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    run = run_pytest(TARGET, tmp_path / "run", "--pb-fixtures", "-k", "calculator",
                     "--agent", "mini-swe-agent", "--solve-model", MODEL,
                     "--agent-config", str(bad))
    assert run.rc == 2, run.out
    run.result.stdout.fnmatch_lines([f"*--agent-config {bad}: top level must be a mapping*"])
    run = run_pytest(TARGET, tmp_path / "run2", "--pb-fixtures", "-k", "calculator",
                     "--agent", "mini-swe-agent")
    assert run.rc == 2, run.out
    run.result.stdout.fnmatch_lines(["*--agent mini-swe-agent needs the model: --solve-model MODEL *"])


def test_an_unpriced_call_leaves_the_cost_unknown_not_zero() -> None:
    from harness.agents.mini_swe import account
    from harness.model_proxy.prices import ModelPrices

    call = {"role": "assistant", "extra": {"cost": 0.0, "response": {
        "usage": {"prompt_tokens": 10, "completion_tokens": 2}}}}
    priced = {"role": "assistant", "extra": {"cost": 0.5, "response": {
        "usage": {"prompt_tokens": 10, "completion_tokens": 2}}}}
    tokens, cost, unpriced, source = account([priced, call], "openai/x", ModelPrices())
    assert cost is None and unpriced == 1 and source == "unknown" and tokens.total == 24
    tokens, cost, unpriced, source = account([priced, priced], "openai/x", ModelPrices())
    assert cost == 1.0 and source == "agent_reported"


def test_issue23_item5_mini_swe_agent_stops_at_the_per_task_limit(tmp_path: Path) -> None:
    """Before: ``--per-task-limit-usd`` was ignored for mini-swe-agent (it looped on).
    Each call costs $0.003: three calls spend $0.009 < $0.01, the fourth crosses it, and
    no fifth call goes out."""
    server = start_fake_model_server(partial_script(), log=tmp_path / "requests.jsonl")
    try:
        run = run_pytest(TARGET, tmp_path / "run", "--pb-fixtures", "-k", "calculator",
                         "--agent", "mini-swe-agent", "--solve-model", MODEL,
                         "--agent-config", str(agent_config(tmp_path / "c.yaml", server.base_url)),
                         "--model-prices", str(prices(tmp_path / "p.json")),
                         "--per-task-limit-usd", "0.01")
    finally:
        server.stop()
    assert run.rc == 0, run.out  # scored, the agent's failure
    row = run.latest[FIXTURE_ID]
    assert row["outcome"] == "agent_failed" and row["reason_code"] == "per_task_limit_reached", row
    assert row["details"]["agent"]["details"]["steps"] == 4
    assert row["cost_usd"] == pytest.approx(4 * 0.003) and row["cost_known"] is True
    assert len((tmp_path / "requests.jsonl").read_text().splitlines()) == 4
