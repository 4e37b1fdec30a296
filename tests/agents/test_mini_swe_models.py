"""Issue 24: mini-swe-agent's row lists the model litellm actually called (the response's
own name, source ``mini_swe``) with its calls, tokens and cost, and its steps; the real
package drives the ProgramBench fixture through the FAKE scripted model server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.programbench import FIXTURE_ID
from harness.testing.fake_model_server import start_fake_model_server
from tests.agents.model_scripts import solve_script
from tests.agents.test_mini_swe_agent import MODEL, TARGET, agent_config, prices
from tests.support.suite import run_pytest

pytestmark = pytest.mark.docker


def test_mini_swe_row_lists_the_model_called_and_its_steps(tmp_path: Path) -> None:
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
    steps = len(solve_script()["responses"])
    per_call = (1000 * 2.0 + 100 * 10.0) / 1e6
    requests = [json.loads(x) for x in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert {r["model"] for r in requests} == {"fake-model"}  # what litellm sent
    assert len(row["models"]) == 1
    called = row["models"][0]
    # the provider answered as "fake-model" (litellm's resolved name, not "openai/...")
    assert {k: v for k, v in called.items() if k != "cost_usd"} == {
        "model": "fake-model", "source": "mini_swe", "calls": steps, "refused": 0,
        "prompt_tokens": 1000 * steps, "completion_tokens": 100 * steps, "allowed": True}
    assert called["cost_usd"] == pytest.approx(steps * per_call)
    assert called["cost_usd"] == pytest.approx(row["cost_usd"])
    assert row["details"]["agent_details"]["steps"] == steps
    record = json.loads((run.root / row["output_paths"]["agent_record"]).read_text())
    assert record["steps"] == steps and record["models"] == row["models"]
