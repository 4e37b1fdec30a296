"""Issue 45, the model pushes back, in whole runs (real Docker, the real ProgramBench eval;
an in-sandbox SDK agent behind the model gateway, the FAKE scripted model upstream): a 429
storm costs the instance latency, not its score, and is billed once; a provider that keeps
refusing past the wait ceiling makes the instance infrastructure (named), never the
model's failure, and a resume with a healthy provider scores it; the campaign's money
settles to exactly the calls that were answered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.programbench import FIXTURE_ID
from harness.testing.fake_model_server import start_fake_model_server
from tests.agents.model_scripts import solve_script, step
from tests.security.model_gateway_support import (
    AGENT_COMMAND,
    PER_CALL_USD,
    SdkInjector,
    fake_model_prices,
)
from tests.support.suite import run_pytest

# slow tier: a minute or more each on this engine (CI runs it after the default tier)
pytestmark = [pytest.mark.docker, pytest.mark.slow]
KEY = "sk-pushback-test-0123456789abcdef"
PER_CALL = PER_CALL_USD  # what one answered call costs at these prices


def paced_run(tmp_path: Path, name: str, upstream_url: str, *extra: str):
    prices = fake_model_prices(tmp_path)
    params = {"key_parts": [KEY], "model": "fake-model", "stream": False, "max_steps": 20}
    root = tmp_path / name
    with SdkInjector(root, params):
        return run_pytest("benchmarks/programbench", root, "--pb-fixtures", "-k",
                          "calculator", "--agent", "command", "--agent-command",
                          AGENT_COMMAND, "--model-upstream", upstream_url, "--model-prices",
                          str(prices), "--model-rpm", "600", "--model-concurrency", "2",
                          "--campaign-file", str(tmp_path / "campaign.json"),
                          "--campaign-budget-usd", "5", "--per-task-reserve-usd", "1",
                          "--unknown-cost-allowance-usd", "1", *extra,
                          env={"HARNESS_MODEL_API_KEY": KEY})


def test_a_429_storm_costs_latency_not_the_score(tmp_path: Path) -> None:
    solve = solve_script()["responses"]
    storm = [{"status": 429, "retry_after": "0.4"}] * 2
    upstream = start_fake_model_server({"responses": [*storm, *solve]})
    try:
        run = paced_run(tmp_path, "storm", upstream.base_url)
    finally:
        upstream.stop()
    assert run.rc == 0, run.out[-3000:]
    row = run.latest[FIXTURE_ID]
    assert row["score"] == 1.0 and row["outcome"] == "scored", row
    trouble = row["details"]["agent"]["model_trouble"]
    assert trouble["rate_limited"] == 2 and trouble["retries"] == 2
    assert trouble["waited_s"] >= 0.8 and trouble["upstream_errors"] == 0
    assert row["cost_usd"] == pytest.approx(len(solve) * PER_CALL, abs=1e-12)  # billed once
    html = (run.root / "report" / "report.html").read_text()
    assert "model trouble: 429s 2, retries 2, waited " in html  # the row, in the report
    assert "1 row(s) met the provider&#39;s pushback" in html
    assert run.manifest["extra"]["model_pacing"]["rpm"] == 600.0
    assert run.manifest["extra"]["model_pacing"]["concurrency"] == 2
    state = json.loads((tmp_path / "campaign.json").read_text())
    assert state["settled_usd"] == pytest.approx(len(solve) * PER_CALL, abs=1e-12)


def test_refusals_past_the_ceiling_are_infrastructure_and_a_resume_scores(
        tmp_path: Path) -> None:
    refusing = start_fake_model_server(  # each try: one answer, then 429s for 30 s
        {"responses": [step("ls"), {"status": 429, "retry_after": "30"}], "loop": True})
    try:
        first = paced_run(tmp_path, "refused", refusing.base_url, "--model-wait-max-s", "1")
    finally:
        refusing.stop()
    tries = [r for r in first.rows if r["instance_id"] == FIXTURE_ID]
    assert len(tries) == 2  # --retry-infra (default 1) ran it again: infrastructure
    row = first.latest[FIXTURE_ID]
    assert row["outcome"] == "infra_failed" and row["reason_code"] == "model_upstream_failed"
    assert row["details"]["agent"]["model_upstream_failure"].startswith("rate_limited")
    assert row["details"]["agent"]["model_trouble"]["rate_limited"] == 1
    assert row["cost_usd"] == pytest.approx(PER_CALL, abs=1e-12)  # the one answered call
    verdict = first.manifest["verdict_score"]  # the honest denominators
    assert verdict["excluded_reasons"] == {"model_upstream_failed": 1}
    solve = solve_script()["responses"]
    host, port = refusing.server.server_address[:2]  # the same upstream, healthy again
    healthy = start_fake_model_server({"responses": solve}, host=str(host), port=int(port))
    try:
        again = paced_run(tmp_path, "resumed", healthy.base_url, "--model-wait-max-s", "1",
                          "--resume-from", str(first.root))
    finally:
        healthy.stop()
    assert again.rc == 0, again.out[-3000:]
    row = again.latest[FIXTURE_ID]
    assert row["score"] == 1.0 and row["attempt"] == 3  # two tries before, then this one
    state = json.loads((tmp_path / "campaign.json").read_text())
    # billed once per answered call: one per try of the first run, then the solve
    assert state["settled_usd"] == pytest.approx((2 + len(solve)) * PER_CALL, abs=1e-12)
    assert state["outstanding_usd"] == pytest.approx(0.0, abs=1e-12)
