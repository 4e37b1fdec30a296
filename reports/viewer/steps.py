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
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.untrusted import read_untrusted_head

MAX_FILE = 16 << 20  # bytes read of one record (a bigger one is not read)
MAX_TAPE_RECORD = 4 << 20  # bytes of one tape record
TEXT_CAP = 8 << 10  # characters kept of one text (output, message, body)
TITLE_CAP = 500
MAX_STEPS = 5000  # steps of one timeline, whatever a record holds
# direction overrides and isolates (Trojan Source), shown, never applied
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f]")


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
    """``text`` with at most ``limit`` characters (its head and tail around a marker), its
    direction controls made visible and unpaired surrogates replaced."""
    if len(text) > limit:
        half = limit // 2
        text = f"{text[:half]}\n[... {len(text) - limit} characters left out ...]\n{text[-half:]}"
    text = _BIDI.sub(lambda m: f"<U+{ord(m.group()):04X}>", text)
    return text.encode("utf-8", "replace").decode("utf-8")


def read_head(path: Path, limit: int) -> bytes | None:
    """At most ``limit`` bytes of the regular file ``path`` (a link, a special file or a
    missing one: None)."""
    return read_untrusted_head(path, limit)


def read_text(path: Path, limit: int = MAX_FILE) -> str | None:
    data = read_head(path, limit)
    return None if data is None else data.decode("utf-8", "replace")


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict | str) for p in value[:1000]):
        return "\n".join(p if isinstance(p, str) else str(p.get("text", "")) for p in
                         value[:1000])  # content parts
    try:
        return "" if value is None else json.dumps(value, ensure_ascii=False, default=str)
    except (ValueError, RecursionError):
        return "[not shown: nested too deep]"


def _json(path: Path, limit: int = MAX_FILE) -> Any:
    """The JSON in ``path``; None when it is not a regular file, is over ``limit`` bytes or
    does not parse (nested past the parser's depth included)."""
    data = read_head(path, limit + 1)
    if data is None or len(data) > limit:
        return None
    try:
        return json.loads(data.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _num(value: Any) -> float | None:
    """A finite number within +-1e15, else None (an agent's NaN, 1e999 or 10**400)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except (OverflowError, ValueError):
        return None
    return number if math.isfinite(number) and abs(number) < 1e15 else None


def _cost(value: Any) -> float | None:
    number = _num(value)
    return number if number is not None and number >= 0 else None


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
    for msg in messages:
        if len(steps) >= MAX_STEPS:
            steps.append(_cut())
            break
        if not isinstance(msg, dict):
            continue
        extra = _dict(msg.get("extra"))
        role = str(msg.get("role"))
        if role == "assistant":
            steps.append(_mini_model_step(msg, extra))
            pending = [Step("command", cap(_text(a.get("command")), TITLE_CAP))
                       for a in _list(extra.get("actions"))[:MAX_STEPS - len(steps)]
                       if isinstance(a, dict)]
            steps.extend(pending)
        elif role == "tool" and pending:
            target = pending.pop(0)
            code = _int(extra.get("returncode"))
            target.at = _num(extra.get("timestamp"))
            target.status = f"exit {code}" if code is not None else None
            target.failed = code not in (0, None)
            target.body = cap(_text(msg.get("content")))
        elif role in ("system", "user"):
            steps.append(Step("event", f"{role} message", body=cap(_text(msg.get("content")))))
    return steps


def _cut() -> Step:
    return Step("event", f"[the record goes on past {MAX_STEPS} steps: not shown]",
                failed=True)


def _mini_model_step(msg: dict[str, Any], extra: dict[str, Any]) -> Step:
    response = _dict(extra.get("response"))
    usage = _dict(response.get("usage"))
    return Step("model", "model call", at=_num(extra.get("timestamp")),
                model=str(response.get("model")) if response.get("model") else None,
                tokens_in=_int(usage.get("prompt_tokens")),
                tokens_out=_int(usage.get("completion_tokens")),
                cost_usd=_cost(extra.get("cost")) or None,
                body=cap(_text(msg.get("content"))))


def gateway_steps(path: Path, plan: list[str]) -> list[Step]:
    """The gateway agent's event log: its steps (the command from the reference plan when
    the task body carries one), the model usage it reported, its status changes."""
    text = read_text(path)
    if text is None:
        return [Step("event", "the event log could not be read", failed=True)]
    steps: list[Step] = []
    for line in text.splitlines():
        if len(steps) >= MAX_STEPS:
            steps.append(_cut())
            break
        try:
            ev = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(ev, dict):
            continue
        kind = str(ev.get("type") or ev.get("kind") or ev.get("event") or "event")
        at = _num(ev.get("ts"))
        if kind == "step":
            index = _int(ev.get("index"))
            title = plan[index] if index is not None and 0 <= index < len(plan) else \
                f"step {index}"
            code, timed_out = _int(ev.get("exit_code")), ev.get("timed_out") is True
            steps.append(Step("command", cap(title, TITLE_CAP), at=at,
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
                              cost_usd=_cost(usage.get("cost_usd"))))
        else:  # the agent server's own words, labelled as such
            status = ev.get("status")
            said = f"{kind}: {status}" if status else kind
            steps.append(Step("event", cap(f"agent server event: {_text(said)}", TITLE_CAP),
                              at=at, body=cap(_text(ev.get("reason_code") or ""))))
    return steps


def command_steps(record: Path, stdout: Path | None, stderr: Path | None) -> list[Step]:
    """The command and host-command agents: one command (their own record), its output."""
    data = _json(record)
    if not isinstance(data, dict):
        return [Step("event", "the agent's record could not be read", failed=True)]
    code, timed_out = _int(data.get("exit_code")), data.get("timed_out") is True
    title = _text(data.get("command")) or "the host agent's command"
    folded = []
    for label, path in (("stdout", stdout), ("stderr", stderr)):
        text = read_text(path, 2 * TEXT_CAP) if path is not None else None
        if text is not None:
            folded.append((label, cap(text)))
    step = Step("command", cap(title, TITLE_CAP), status="timed out" if timed_out else
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
                cost_usd=_cost(data.get("cost_usd")))


def tape_steps(index: Path, records: Path) -> list[Step]:
    """A recorded tape's model calls in order, their bodies folded."""
    data = _json(index)
    calls = data.get("calls") if isinstance(data, dict) else data
    if not isinstance(calls, list):
        return []
    steps: list[Step] = []
    parsed: dict[str, dict[str, Any]] = {}  # one parse per record, however many calls name it
    for call in calls[:MAX_STEPS]:
        if not isinstance(call, dict):
            continue
        sha = str(call.get("record") or "")
        if sha not in parsed:
            raw = _json(records / sha[:2] / f"{sha}.json", MAX_TAPE_RECORD) \
                if 2 < len(sha) <= 64 and sha.isalnum() else None
            parsed[sha] = raw if isinstance(raw, dict) else {}
        rec = parsed[sha]
        usage = _dict(rec.get("usage"))
        request = _dict(rec.get("request"))
        response = _dict(rec.get("response"))
        body = response.get("body") if response.get("body") is not None else \
            "\n".join(_text(e) for e in _list(response.get("events"))[:10_000])
        steps.append(Step(
            "model", f"model call {call.get('position', len(steps))}",
            at=_num(call.get("started_at")), duration_s=_num(call.get("latency_s")),
            model=_text(rec.get("model") or usage.get("model")) or None,
            status=_call_status(call),
            failed=bool(rec.get("upstream_error")) or _int(call.get("status")) not in (200, None),
            tokens_in=_int(usage.get("prompt_tokens")),
            tokens_out=_int(usage.get("completion_tokens")), cost_usd=_cost(rec.get("cost_usd")),
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
