"""Issue 24, a model-swap attack from inside the sandbox: a command agent behind the model
gateway (real engine, the ProgramBench offline fixture, the scripted upstream) asks for
other models every way it can (another name, case and spaces, a provider prefix, a second
``model`` key, a case-variant key, a fallback list, a query string, a header, every route,
streamed or not, no model at all). Each gets 403 ``model_not_allowed``; the upstream
receives only the two allowed calls (the declared model and an ``--allow-model`` helper);
the row lists every model asked, the refused ones with ``allowed: false``."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from benchmarks.programbench import FIXTURE_ID
from harness.testing.fake_model_server import start_fake_model_server
from tests.agents.model_scripts import step
from tests.support.suite import run_pytest

pytestmark = pytest.mark.docker
TARGET = "benchmarks/programbench"
KEY = "sk-pinning-attack-0123456789abcdef"

# The agent: stdlib only, raw HTTP to the gateway it was given (OPENAI_BASE_URL).
AGENT = r'''
import http.client, json, os
from urllib.parse import urlsplit
base = urlsplit(os.environ["OPENAI_BASE_URL"])
MSGS = [{"role": "user", "content": "hi"}]

def call(path, body=None, raw=None, headers=None):
    conn = http.client.HTTPConnection(base.hostname, base.port, timeout=60)
    data = raw if raw is not None else json.dumps(body).encode()
    head = {"Content-Type": "application/json",
            "Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "")}
    head.update(headers or {})
    conn.request("POST", base.path + path, body=data, headers=head)
    resp = conn.getresponse()
    text = resp.read().decode("utf-8", "replace")
    conn.close()
    try:
        err = json.loads(text).get("error") or {}
    except ValueError:
        err = {}
    return {"status": resp.status, "code": err.get("code") or err.get("type"),
            "message": err.get("message")}

swaps = {
    "other": ("/chat/completions", {"model": "gpt-4o-mini", "messages": MSGS}),
    "case_and_spaces_streamed": ("/chat/completions", {"model": " GPT-4O-MINI\n",
                                                       "messages": MSGS, "stream": True}),
    "provider_prefix": ("/chat/completions", {"model": "openai/gpt-4o-mini",
                                              "messages": MSGS}),
    "prefix_before_declared": ("/chat/completions", {"model": "acme/fake-model",
                                                     "messages": MSGS}),
    "second_model_key": ("/chat/completions",
                         b'{"model": "fake-model", "messages": [], "model": "gpt-4o-mini"}'),
    "case_variant_key": ("/chat/completions", {"model": "fake-model", "MODEL": "gpt-4o-mini",
                                               "messages": MSGS}),
    "fallback_list": ("/chat/completions", {"model": "fake-model", "models": ["gpt-4o-mini"],
                                            "route": "fallback", "messages": MSGS}),
    "query_string": ("/chat/completions?model=gpt-4o-mini", {"model": "fake-model",
                                                             "messages": MSGS}),
    "header": ("/chat/completions", {"model": "fake-model", "messages": MSGS},
               {"X-Model": "gpt-4o-mini"}),
    "completions": ("/completions", {"model": "gpt-4o-mini", "prompt": "hi"}),
    "responses_streamed": ("/responses", {"model": "gpt-4o-mini", "input": "hi",
                                          "stream": True}),
    "embeddings": ("/embeddings", {"model": "text-embedding-3-large", "input": "hi"}),
    "anthropic": ("/messages", {"model": "claude-opus-4", "max_tokens": 10,
                                "messages": MSGS}),
    "anthropic_streamed": ("/messages", {"model": "claude-opus-4", "max_tokens": 10,
                                         "messages": MSGS, "stream": True}),
    "no_model": ("/chat/completions", {"messages": MSGS}),
}
report = {}
for name, spec in swaps.items():
    path, body = spec[0], spec[1]
    headers = spec[2] if len(spec) > 2 else None
    if isinstance(body, bytes):
        report[name] = call(path, raw=body, headers=headers)
    else:
        report[name] = call(path, body, headers=headers)
report["helper"] = call("/chat/completions", {"model": "helper-mini", "messages": MSGS})
report["declared"] = call("/chat/completions", {"model": "fake-model", "messages": MSGS})
print("PIN_REPORT " + json.dumps(report), flush=True)
'''


def agent_command() -> str:
    blob = base64.b64encode(AGENT.encode()).decode()
    return f'python3 -c "$(echo {blob} | base64 -d)"'


def pin_report(stdout: str) -> dict[str, dict[str, object]]:
    for line in stdout.splitlines():
        if line.startswith("PIN_REPORT "):
            return dict(json.loads(line[len("PIN_REPORT "):]))
    raise AssertionError(f"no report in:\n{stdout[-2000:]}")


def test_a_model_swap_from_the_sandbox_reaches_nothing_and_the_row_records_it(
        tmp_path: Path) -> None:
    upstream = start_fake_model_server({"responses": [step("ls", prompt=1000, completion=100,
                                                           cost=0.002)], "loop": True},
                                       log=tmp_path / "upstream.jsonl")
    try:
        run = run_pytest(TARGET, tmp_path / "run", "--pb-fixtures", "-k", "calculator",
                         "--agent", "command", "--agent-command", agent_command(),
                         "--model-upstream", upstream.base_url,
                         "--solve-model", "openai/fake-model", "--allow-model", "helper-mini",
                         env={"HARNESS_MODEL_API_KEY": KEY})
    finally:
        upstream.stop()
    assert run.rc == 0, run.out
    row = run.latest[FIXTURE_ID]
    report = pin_report((run.root / row["output_paths"]["agent_stdout"]).read_text())
    swaps = {k: v for k, v in report.items() if k not in ("helper", "declared")}
    assert len(swaps) == 15
    for name, answer in swaps.items():
        assert answer["status"] == 403, (name, answer)
        assert answer["code"] == "model_not_allowed", (name, answer)
        assert "allowed 'openai/fake-model', 'helper-mini'" in str(answer["message"]), answer
    assert "'gpt-4o-mini' is not allowed" in str(swaps["other"]["message"])
    assert report["helper"]["status"] == 200 and report["declared"]["status"] == 200, report
    # nothing of the swaps reached the provider: only the two allowed calls
    assert upstream.requests == 2
    seen = [json.loads(x) for x in (tmp_path / "upstream.jsonl").read_text().splitlines()]
    assert [s["model"] for s in seen] == ["helper-mini", "fake-model"]
    # the row: every model asked, the refused ones not allowed
    models = {(m["model"], m["allowed"]): m for m in row["models"]}
    assert set(models) == {("helper-mini", True), ("fake-model", True),
                           ("gpt-4o-mini", False), ("openai/gpt-4o-mini", False),
                           ("acme/fake-model", False), ("text-embedding-3-large", False),
                           ("claude-opus-4", False), ("(none)", False)}
    assert models[("gpt-4o-mini", False)]["refused"] == 9
    assert models[("claude-opus-4", False)]["refused"] == 2
    assert all(m["source"] == "model_proxy" for m in row["models"])
    assert all(m["calls"] == 0 and m["cost_usd"] == 0.0 for m in row["models"]
               if not m["allowed"])
    for name in ("helper-mini", "fake-model"):
        allowed = models[(name, True)]
        assert (allowed["calls"], allowed["refused"], allowed["prompt_tokens"],
                allowed["completion_tokens"]) == (1, 0, 1000, 100)
        assert allowed["cost_usd"] == pytest.approx(0.002)
    assert row["cost_usd"] == pytest.approx(0.004) and row["cost_known"] is True
    assert row["details"]["agent"]["details"]["model_not_allowed"] == 15
    usage = json.loads((run.root / row["output_paths"]["model_gateway"]).read_text())
    assert usage["pinned_models"] == ["openai/fake-model", "helper-mini"]
    assert usage["model_not_allowed"] == 15 and usage["calls"] == 2
    # the run records the helper model among the options that change results
    assert run.manifest["extra"]["agent"]["allow_models"] == ["helper-mini"]


def test_a_paid_upstream_without_the_declared_model_is_refused_at_startup(
        tmp_path: Path) -> None:
    run = run_pytest(TARGET, tmp_path / "run", "--pb-fixtures", "-k", "calculator",
                     "--agent", "command", "--agent-command", "true",
                     "--model-upstream", "https://openrouter.ai/api/v1",
                     env={"HARNESS_MODEL_API_KEY": KEY})
    assert run.rc == 2, run.out
    run.result.stdout.fnmatch_lines([
        "*--model-upstream https://openrouter.ai/api/v1: name the model under test with "
        "--solve-model MODEL (the gateway forwards only it and each --allow-model NAME)*"])
    assert KEY not in run.out
