"""Tokens and cost of one model call, from the provider's response (JSON or a stream of
server-sent events), for the OpenAI chat/completions/responses and Anthropic Messages
shapes; and :class:`InstanceMeter`, the running total of one instance.

Cost of a call: the provider's own field when present (``usage.cost``, as OpenRouter
reports it; source ``provider``), else the ``--model-prices`` table (source ``prices``),
else unknown: the instance's cost is then unknown, never $0.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.core.models import ModelCalls
from harness.model_proxy.prices import ModelPrices

SOURCE = "model_proxy"  # ModelCalls.source of the gateway's records
MAX_MODEL_ENTRIES = 20  # distinct (model, allowed) records; the rest share OTHER_MODELS
OTHER_MODELS = "(other models)"
UNNAMED = "(not named)"


@dataclass
class CallUsage:
    prompt: int = 0
    completion: int = 0
    cached: int = 0
    provider_cost: float | None = None
    model: str | None = None
    seen: bool = False  # a usage block was found

    def absorb(self, usage: Mapping[str, Any]) -> None:
        """Merge a usage block (OpenAI or Anthropic names); later values win."""
        self.seen = True
        for key, attr in (("prompt_tokens", "prompt"), ("input_tokens", "prompt"),
                          ("completion_tokens", "completion"), ("output_tokens", "completion")):
            value = usage.get(key)
            if isinstance(value, int) and value >= 0:
                setattr(self, attr, value)
        extra_in = sum(v for k in ("cache_read_input_tokens", "cache_creation_input_tokens")
                       if isinstance(v := usage.get(k), int) and v > 0)
        if extra_in and "input_tokens" in usage:
            self.prompt = int(usage.get("input_tokens") or 0) + extra_in
            self.cached = int(usage.get("cache_read_input_tokens") or 0)
        details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details")
        if isinstance(details, Mapping) and isinstance(details.get("cached_tokens"), int):
            self.cached = int(details["cached_tokens"])
        cost = usage.get("cost")
        if isinstance(cost, (int, float)) and not isinstance(cost, bool) and \
                math.isfinite(cost) and cost >= 0:
            self.provider_cost = float(cost)


def usage_from_json(body: Mapping[str, Any]) -> CallUsage:
    out = CallUsage(model=body.get("model") if isinstance(body.get("model"), str) else None)
    usage = body.get("usage")
    if isinstance(usage, Mapping):
        out.absorb(usage)
    response = body.get("response")  # responses API stream events wrap the response
    if isinstance(response, Mapping) and isinstance(response.get("usage"), Mapping):
        out.absorb(response["usage"])
    message = body.get("message")  # anthropic message_start
    if isinstance(message, Mapping):
        if isinstance(message.get("model"), str):
            out.model = message["model"]
        if isinstance(message.get("usage"), Mapping):
            out.absorb(message["usage"])
    return out


class SSEUsage:
    """Feeds on a server-sent-event stream; keeps the call's usage. ``transform`` decides,
    per event, whether it is passed on (the usage-only chunk the gateway asked for when the
    client did not is dropped)."""

    def __init__(self, drop_usage_only_chunks: bool = False,
                 capture: list[bytes] | None = None) -> None:
        self.usage = CallUsage()
        self.drop = drop_usage_only_chunks
        self.capture = capture  # every event parsed, kept or not (recording)
        self.tail = b""  # what followed the last whole event (:meth:`flush`)
        self._buf = b""

    def feed(self, data: bytes) -> bytes:
        """Return the bytes to forward now (whole events only)."""
        self._buf += data
        out = bytearray()
        while True:
            cut = _event_end(self._buf)
            if cut is None:
                break
            event, self._buf = self._buf[:cut[0]], self._buf[cut[1]:]
            out += self.feed_event(event)
        return bytes(out)

    def feed_event(self, event: bytes) -> bytes:
        """One whole event (without its blank line): the bytes to forward for it. A
        replay feeds the recorded events one by one: the same bytes as when recorded."""
        if self.capture is not None:
            self.capture.append(event)
        return event + b"\n\n" if self._keep(event) else b""

    def flush(self) -> bytes:
        rest, self._buf = self._buf, b""
        return self.flush_tail(rest)

    def flush_tail(self, rest: bytes) -> bytes:
        """The bytes after the last whole event (forwarded as they are, if kept)."""
        self.tail = rest
        if rest and self._keep(rest):
            return rest
        return b""

    def _keep(self, event: bytes) -> bool:
        for line in event.splitlines():
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if not payload or payload == b"[DONE]":
                continue
            try:
                obj = json.loads(payload)
            except ValueError:
                continue
            if not isinstance(obj, dict):
                continue
            part = usage_from_json(obj)
            if part.seen:
                if part.provider_cost is not None:
                    self.usage.provider_cost = part.provider_cost
                if obj.get("type") == "message_delta":  # anthropic: output tokens so far
                    self.usage.completion = part.completion
                else:
                    self.usage.prompt = part.prompt or self.usage.prompt
                    self.usage.completion = part.completion or self.usage.completion
                    self.usage.cached = part.cached or self.usage.cached
                self.usage.seen = True
            if part.model and not self.usage.model:
                self.usage.model = part.model
            if self.drop and part.seen and obj.get("choices") == []:
                return False
        return True


def _event_end(buf: bytes) -> tuple[int, int] | None:
    best: tuple[int, int] | None = None
    for sep in (b"\n\n", b"\r\n\r\n"):
        i = buf.find(sep)
        if i >= 0 and (best is None or i < best[0]):
            best = (i, i + len(sep))
    return best


@dataclass(frozen=True)
class CallCost:
    """One call's cost as metered (None: unknown) and its source: ``provider`` (the
    response's own cost field), ``prices`` (``--model-prices``), ``unpriced`` (neither) or
    ``usage_missing`` (the response had no usage)."""

    cost_usd: float | None
    source: str


class MeterState(BaseModel):
    """``model_gateway.json`` in the instance folder."""

    model_config = ConfigDict(extra="forbid")

    schema_: str = Field(default="harness.model_gateway.usage.v1", alias="schema")
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    priced_by_provider: int = 0
    priced_by_table: int = 0
    unpriced_calls: int = 0
    usage_missing: int = 0
    refused: int = 0
    upstream_errors: int = 0
    # model trouble (issue 45; harness.model_proxy.pacing): 429 answers seen, calls sent
    # again, seconds waited (pacing and backoff), streams cut for silence
    rate_limited: int = 0
    retries: int = 0
    waited_s: float = 0.0
    stalls: int = 0
    limit_usd: float | None = None
    limit_reached: bool = False
    limit_reason: str | None = None
    models: list[str] = Field(default_factory=list)
    # Model pinning: the names forwarded (None: nothing pinned, every model forwarded), the
    # calls refused with 403 model_not_allowed, and the calls per model (source model_proxy).
    pinned_models: list[str] | None = None
    model_not_allowed: int = 0
    by_model: list[ModelCalls] = Field(default_factory=list)

    @property
    def cost_known(self) -> bool:
        return self.unpriced_calls == 0 and self.usage_missing == 0


@dataclass
class InstanceMeter:
    prices: ModelPrices
    limit_usd: float | None = None
    pinned: tuple[str, ...] | None = None  # the allowed models (None: nothing pinned)
    state: MeterState = field(default_factory=MeterState)
    lock: threading.Lock = field(default_factory=threading.Lock)

    # With a per-task limit, calls go out one at a time: each is admitted knowing what every
    # earlier call cost, so the limit is overshot by at most the one call that crosses it
    # (concurrent calls admitted together could each cross it).
    slot: threading.Lock = field(default_factory=threading.Lock)
    # Replayed calls (--model-replay): what they cost when recorded, and how many of them
    # had no known cost; only the per-task limit reads these (a replay reports $0).
    replay_spent: float = 0.0
    replay_unpriced: int = 0

    def __post_init__(self) -> None:
        self.state.limit_usd = self.limit_usd
        self.state.pinned_models = None if self.pinned is None else list(self.pinned)

    def _entry(self, model: str, allowed: bool) -> ModelCalls:
        """The record of ``model`` (under the lock); past :data:`MAX_MODEL_ENTRIES` names
        one shared record, so an agent naming endless models cannot grow the row."""
        entries = self.state.by_model
        for entry in entries:
            if entry.model == model and entry.allowed == allowed:
                return entry
        if len(entries) >= MAX_MODEL_ENTRIES:
            model = OTHER_MODELS
            for entry in entries:
                if entry.model == model and entry.allowed == allowed:
                    return entry
        entry = ModelCalls(model=model, source=SOURCE, allowed=allowed, prompt_tokens=0,
                           completion_tokens=0, cost_usd=0.0)
        entries.append(entry)
        return entry

    def refuse_model(self, asked: str) -> None:
        """A call refused with 403 model_not_allowed (it reached nothing)."""
        with self.lock:
            self.state.model_not_allowed += 1
            self._entry(asked, allowed=False).refused += 1

    @contextlib.contextmanager
    def call_slot(self) -> Iterator[None]:
        """Held for a whole call (admission, forwarding, recording) under a limit."""
        if self.limit_usd is None:
            yield
            return
        with self.slot:
            yield

    def admit(self) -> str | None:
        """None if a call may go out, else the refusal message."""
        with self.lock:
            s = self.state
            if self.limit_usd is None:
                return None
            spent = s.cost_usd + self.replay_spent  # a replay spends what the recording did
            if not s.limit_reached and spent >= self.limit_usd:
                s.limit_reached, s.limit_reason = True, "spent"
            if not s.limit_reached and (not s.cost_known or self.replay_unpriced):
                s.limit_reached, s.limit_reason = True, "cost_unknown"
            if s.limit_reached:
                s.refused += 1
                why = ("the cost of an earlier call is unknown"
                       if s.limit_reason == "cost_unknown" else
                       f"spent ${spent:.6f} of ${self.limit_usd:g}")
                return f"per_task_limit_reached: the per-task model budget is spent ({why}); "\
                       f"no more model calls"
            return None

    def _count(self, usage: CallUsage, requested_model: str | None) -> ModelCalls:
        """One call counted (under the lock): the models named, and its model's record."""
        s = self.state
        s.calls += 1
        for name in (requested_model, usage.model):
            if name and name not in s.models and len(s.models) < 20:
                s.models.append(name)
        entry = self._entry(requested_model or usage.model or UNNAMED, allowed=True)
        entry.calls += 1
        return entry

    def _add_tokens(self, entry: ModelCalls, usage: CallUsage) -> None:
        s = self.state
        s.prompt_tokens += usage.prompt
        s.completion_tokens += usage.completion
        entry.prompt_tokens = (entry.prompt_tokens or 0) + usage.prompt
        entry.completion_tokens = (entry.completion_tokens or 0) + usage.completion

    def record(self, usage: CallUsage, requested_model: str | None) -> CallCost:
        """Meter one forwarded call; returns its cost and where the cost came from."""
        with self.lock:
            s = self.state
            entry = self._count(usage, requested_model)
            if not usage.seen:
                s.usage_missing += 1
                entry.cost_usd = None
                return CallCost(None, "usage_missing")
            self._add_tokens(entry, usage)
            if usage.provider_cost is not None:
                cost: float | None = usage.provider_cost
                source = "provider"
                s.priced_by_provider += 1
            else:
                cost = self.prices.cost(usage.prompt, usage.completion, requested_model,
                                        usage.model, cached=usage.cached)
                source = "prices" if cost is not None else "unpriced"
                if cost is None:
                    s.unpriced_calls += 1
                else:
                    s.priced_by_table += 1
            if cost is None:
                entry.cost_usd = None  # unknown from now on, never 0
                return CallCost(None, source)
            s.cost_usd += cost
            if entry.cost_usd is not None:
                entry.cost_usd += cost
            return CallCost(cost, source)

    def replayed(self, usage: CallUsage, requested_model: str | None,
                 original: float | None) -> None:
        """Meter one call served from a recording (``--model-replay``): its tokens as
        recorded, cost $0 (nothing was paid). ``original`` (the cost metered when it was
        recorded, None when unknown) counts against ``--per-task-limit-usd`` so the limit
        stops a replayed agent where it stopped the recorded one."""
        with self.lock:
            self._add_tokens(self._count(usage, requested_model), usage)
            if original is None:
                self.replay_unpriced += 1
            else:
                self.replay_spent += original

    def upstream_error(self) -> None:
        with self.lock:
            self.state.upstream_errors += 1

    def trouble(self, *, rate_limited: int = 0, retries: int = 0, waited_s: float = 0.0,
                stalls: int = 0) -> None:
        """Count what the provider's pushback cost (none of it is billed)."""
        with self.lock:
            s = self.state
            s.rate_limited += rate_limited
            s.retries += retries
            s.waited_s = round(s.waited_s + waited_s, 3)
            s.stalls += stalls

    def trouble_record(self) -> dict[str, float | int]:
        """The row's ``details.model_trouble`` (empty when the provider never pushed back)."""
        with self.lock:
            s = self.state
            out = {"calls": s.calls, "rate_limited": s.rate_limited, "retries": s.retries,
                   "waited_s": s.waited_s, "stalls": s.stalls,
                   "upstream_errors": s.upstream_errors}
        return out if any(out[k] for k in out if k != "calls") else {}

    def snapshot(self) -> MeterState:
        with self.lock:
            return self.state.model_copy(deep=True)

    def models_called(self) -> list[ModelCalls]:
        """The calls per model (forwarded and refused), for the row's ``models``."""
        with self.lock:
            return [e.model_copy(update={"cost_usd": round(e.cost_usd, 12)})
                    if e.cost_usd is not None else e.model_copy() for e in self.state.by_model]
