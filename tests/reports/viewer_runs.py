"""Agent records as each agent kind writes them, for the viewer's tests (the shapes of
mini-swe-agent's trajectory, the gateway's event log, the command agent's record, the model
gateway's totals and a tape; see reports/viewer/steps.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

T0 = 1_796_000_000.0


def trajectory(commands: list[tuple[str, int, str]], *, model: str = "fake-model",
               content: str = "Next step.", cost: float = 0.01) -> dict[str, Any]:
    """mini-swe-agent's ``messages``: a system and a user message, then per command the
    model's response asking for it and the tool's answer."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helper."},
                                      {"role": "user", "content": "Do the task."}]
    t = T0
    for n, (command, code, output) in enumerate(commands):
        t += 2
        messages.append({"role": "assistant", "content": content, "extra": {
            "actions": [{"command": command, "tool_call_id": f"call_{n}"}],
            "response": {"model": model, "usage": {"prompt_tokens": 1000 + n,
                                                   "completion_tokens": 100}},
            "cost": cost, "timestamp": t}})
        t += 1
        messages.append({"role": "tool", "content": f"<returncode>{code}</returncode>\n"
                         f"<output>\n{output}</output>\n",
                         "extra": {"returncode": code, "timestamp": t}})
    return {"info": {}, "messages": messages, "trajectory_format": "mini-swe-agent-1"}


def gateway_events(steps: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"seq": 0, "ts": T0, "type": "status", "status": "running"}]
    for i in range(steps):
        out.append({"seq": len(out), "ts": T0 + i + 1, "type": "llm_usage",
                    "prompt_tokens": 120, "completion_tokens": 30, "cost_usd": 0.25})
        out.append({"seq": len(out), "ts": T0 + i + 1.5, "type": "step", "index": i,
                    "exit_code": 0 if i < steps - 1 else 2, "duration_s": 0.5,
                    "timed_out": False, "output_tail": f"out {i}"})
    out.append({"seq": len(out), "ts": T0 + steps + 2, "type": "status",
                "status": "completed"})
    return out


def write_tape(root: Path, benchmark: str, instance: str, calls: int) -> None:
    """A tape of ``calls`` exchanges (``--model-record DIR``)."""
    index = []
    for n in range(calls):
        record = {"key": f"k{n}", "model": "gpt-test",
                  "request": {"method": "POST", "route": "/v1/chat/completions",
                              "body": {"model": "gpt-test", "messages": [
                                  {"role": "user", "content": f"question {n}"}]}},
                  "response": {"status": 200, "content_type": "application/json",
                               "body": json.dumps({"choices": [{"message": {
                                   "content": f"answer {n}"}}]})},
                  "usage": {"seen": True, "prompt_tokens": 50, "completion_tokens": 5},
                  "cost_usd": 0.001}
        sha = hashlib.sha256(json.dumps(record).encode()).hexdigest()
        path = root / "records" / sha[:2] / f"{sha}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))
        index.append({"position": n, "key": f"k{n}", "record": sha, "method": "POST",
                      "route": "/v1/chat/completions", "stream": False, "status": 200,
                      "started_at": T0 + n, "latency_s": 0.25,
                      **({"trouble": {"rate_limited": 2, "waited_s": 3.0}} if n == 1 else {})})
    path = root / "instances" / benchmark / f"{instance}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"benchmark": benchmark, "instance_id": instance,
                                "recorded_at": "2026-12-06T00:00:00Z", "calls": index}))
