"""An instance's steps on one timeline, read from what its agent recorded.

Every agent kind gives the steps it has: mini-swe-agent's trajectory (model calls and the
commands they asked for, with their exit codes and outputs), the gateway agent's event log
(its steps and the model usage it reported), the command and host-command agents' record
(one command, its exit code and output; the model gateway's totals; the ``harness exec``
calls counted), and a recorded tape's model calls (request and response bodies). Every file
is the agent's, so untrusted: read bounded, parsed leniently, each text capped; a file that
does not parse is a step that says so, never an error of the report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.untrusted import read_untrusted_bytes

MAX_FILE = 16 << 20  # bytes read of one record
TEXT_CAP = 8 << 10  # characters kept of one text (output, message, body)
MAX_STEPS = 5000


@dataclass
class Step:
    """One entry of the timeline (``at``: epoch seconds, None when not recorded)."""

    kind: str  # "model", "command", "event", "output"
    title: str
    at: float | None = None
    status: str | None = None  # an exit code, "timed out", an HTTP status, ...
    failed: bool = False
    body: str = ""
    model: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost_usd: float | None = None
    duration_s: float | None = None
    folded: list[tuple[str, str]] = field(default_factory=list)  # (label, capped text)


def cap(text: str, limit: int = TEXT_CAP) -> str:
    """``text`` with at most ``limit`` characters: its head and tail around a marker."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters left out ...]\n{text[-half:]}"


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts
        return "\n".join(_text(p.get("text", "") if isinstance(p, dict) else p) for p in value)
    return "" if value is None else json.dumps(value, ensure_ascii=False, default=str)


def _json(path: Path) -> Any:
    try:
        return json.loads(read_untrusted_bytes(path, MAX_FILE).decode("utf-8", "replace"))
    except (OSError, ValueError):
        return None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else None


def _int(value: Any) -> int | None:
    n = _num(value)
    return int(n) if n is not None else None


def mini_swe_steps(path: Path) -> list[Step]:
    """mini-swe-agent's trajectory: each model response, then the commands it ran."""
    data = _json(path)
    messages = data.get("messages") if isinstance(data, dict) else None
    if not isinstance(messages, list):
        return [Step("event", "the trajectory could not be read", failed=True)]
    steps: list[Step] = []
    pending: list[Step] = []
    for msg in messages[:MAX_STEPS]:
        if not isinstance(msg, dict):
            continue
        extra = _dict(msg.get("extra"))
        role = str(msg.get("role"))
        if role == "assistant":
            steps.append(_mini_model_step(msg, extra))
            pending = [Step("command", cap(_text(a.get("command")), 2000))
                       for a in extra.get("actions") or [] if isinstance(a, dict)]
            steps.extend(pending)
        elif role == "tool" and pending:
            target = pending.pop(0)
            code = extra.get("returncode")
            target.at = _num(extra.get("timestamp"))
            target.status = f"exit {code}" if code is not None else None
            target.failed = code not in (0, None)
            target.body = cap(_text(msg.get("content")))
        elif role in ("system", "user"):
            steps.append(Step("event", f"{role} message", body=cap(_text(msg.get("content")))))
    return steps


def _mini_model_step(msg: dict[str, Any], extra: dict[str, Any]) -> Step:
    response = _dict(extra.get("response"))
    usage = _dict(response.get("usage"))
    return Step("model", "model call", at=_num(extra.get("timestamp")),
                model=str(response.get("model")) if response.get("model") else None,
                tokens_in=_int(usage.get("prompt_tokens")),
                tokens_out=_int(usage.get("completion_tokens")),
                cost_usd=_num(extra.get("cost")) or None,
                body=cap(_text(msg.get("content"))))


def gateway_steps(path: Path, plan: list[str]) -> list[Step]:
    """The gateway agent's event log: its steps (the command from the reference plan when
    the task body carries one), the model usage it reported, its status changes."""
    try:
        lines = read_untrusted_bytes(path, MAX_FILE).decode("utf-8", "replace").splitlines()
    except OSError:
        return [Step("event", "the event log could not be read", failed=True)]
    steps: list[Step] = []
    for line in lines[:MAX_STEPS]:
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if not isinstance(ev, dict):
            continue
        kind = str(ev.get("type") or ev.get("kind") or ev.get("event") or "event")
        at = _num(ev.get("ts"))
        if kind == "step":
            index = _int(ev.get("index"))
            title = plan[index] if index is not None and 0 <= index < len(plan) else \
                f"step {index}"
            code, timed_out = ev.get("exit_code"), bool(ev.get("timed_out"))
            steps.append(Step("command", cap(title, 2000), at=at,
                              status="timed out" if timed_out else
                              (f"exit {code}" if code is not None else None),
                              failed=timed_out or code not in (0, None),
                              duration_s=_num(ev.get("duration_s")),
                              body=cap(_text(ev.get("output_tail")))))
        elif kind == "llm_usage":
            usage = next((ev[k] for k in ("llm_usage", "usage", "data")
                          if isinstance(ev.get(k), dict)), ev)
            steps.append(Step("model", "model usage", at=at,
                              model=str(usage["model"]) if usage.get("model") else None,
                              tokens_in=_int(usage.get("prompt_tokens")),
                              tokens_out=_int(usage.get("completion_tokens")),
                              cost_usd=_num(usage.get("cost_usd"))))
        else:
            status = ev.get("status")
            steps.append(Step("event", f"{kind}: {status}" if status else kind, at=at,
                              body=cap(_text(ev.get("reason_code") or ""))))
    return steps


def command_steps(record: Path, stdout: Path | None, stderr: Path | None) -> list[Step]:
    """The command and host-command agents: one command (their own record), its output."""
    data = _json(record)
    if not isinstance(data, dict):
        return [Step("event", "the agent's record could not be read", failed=True)]
    code, timed_out = data.get("exit_code"), bool(data.get("timed_out"))
    title = _text(data.get("command")) or "the host agent's command"
    folded = []
    for label, path in (("stdout", stdout), ("stderr", stderr)):
        if path is not None and path.is_file():
            folded.append((label, cap(read_untrusted_bytes(path, MAX_FILE).decode(
                "utf-8", "replace"))))
    step = Step("command", cap(title, 2000), status="timed out" if timed_out else
                f"exit {code}", failed=timed_out or code not in (0, None),
                duration_s=_num(data.get("wall_s")), folded=folded)
    out = [step]
    calls, refused = _int(data.get("exec_calls")), _int(data.get("exec_refused"))
    if calls is not None:
        out.append(Step("event", f"harness exec: {calls} calls, {refused or 0} refused"))
    return out


def gateway_totals(path: Path) -> Step | None:
    """The model gateway's totals for a command agent (per call it keeps none)."""
    data = _json(path)
    if not isinstance(data, dict):
        return None
    trouble = {k: data.get(k) for k in ("rate_limited", "retries", "waited_s", "stalls",
                                         "upstream_errors", "refused") if data.get(k)}
    status = ", ".join(f"{k} {v}" for k, v in trouble.items()) or None
    return Step("model", f"model gateway: {_int(data.get('calls')) or 0} calls",
                status=status, failed=bool(trouble),
                tokens_in=_int(data.get("prompt_tokens")),
                tokens_out=_int(data.get("completion_tokens")),
                cost_usd=_num(data.get("cost_usd")))


def tape_steps(index: Path, records: Path) -> list[Step]:
    """A recorded tape's model calls in order, their bodies folded."""
    data = _json(index)
    calls = data.get("calls") if isinstance(data, dict) else data
    if not isinstance(calls, list):
        return []
    steps: list[Step] = []
    for call in calls[:MAX_STEPS]:
        if not isinstance(call, dict):
            continue
        sha = str(call.get("record") or "")
        raw = _json(records / sha[:2] / f"{sha}.json") if len(sha) > 2 and sha.isalnum() \
            else None
        rec: dict[str, Any] = raw if isinstance(raw, dict) else {}
        usage = _dict(rec.get("usage"))
        request = _dict(rec.get("request"))
        response = _dict(rec.get("response"))
        body = response.get("body") if response.get("body") is not None else \
            "\n".join(_text(e) for e in response.get("events") or [])
        steps.append(Step(
            "model", f"model call {call.get('position', len(steps))}",
            at=_num(call.get("started_at")), duration_s=_num(call.get("latency_s")),
            model=_text(rec.get("model") or usage.get("model")) or None,
            status=_call_status(call),
            failed=bool(rec.get("upstream_error")) or _int(call.get("status")) not in (200, None),
            tokens_in=_int(usage.get("prompt_tokens")),
            tokens_out=_int(usage.get("completion_tokens")), cost_usd=_num(rec.get("cost_usd")),
            folded=[("request", cap(_text(request.get("body")))),
                    ("response", cap(_text(body)))]))
    return steps


def _call_status(call: dict[str, Any]) -> str | None:
    """``HTTP 200``, then the call's pushback: ``429 x2, retries 1, waited 3.0 s, stalls 1``."""
    parts = [f"HTTP {call['status']}"] if call.get("status") is not None else []
    trouble = _dict(call.get("trouble"))
    for key, label in (("rate_limited", "429 x{}"), ("retries", "retries {}"),
                       ("waited_s", "waited {} s"), ("stalls", "stalls {}")):
        if _num(trouble.get(key)):
            parts.append(label.format(trouble[key]))
    return ", ".join(parts) or None
