"""Evidence that survives an abort: the task's events, copied before every status request.

Before each poll of a task, :class:`EventLog` asks the agent server for the events past its
cursor (``GET /api/tasks/{id}/events?cursor=N``) and appends them, scrubbed, to
``<instance>/gateway_events.jsonl``: a run killed mid-task keeps what the task did up to
its last poll, and ``llm_usage`` records with tokens prove it spent (``paid_activity``).

The reference gives the endpoint but not its answer's format, so the client accepts the
shapes a server may reasonably send: ``{events: [...], cursor|next_cursor: C}`` or a bare
list (the cursor is then an offset). A server without the endpoint (404, 405, 501) or with
another format is recorded once (``state``) and not asked again. Copying never fails the
poll loop: an error is recorded and the next poll tries again.

The ``llm_usage`` records also give the row's ``models`` (source ``gateway_server``): per
model the record names (``model``, in the record or its ``llm_usage``/``usage``/``data``
part), the calls, tokens and cost; a model's cost is unknown (None) once one of its records
reports none. The server is the agent under test: names are bounded and escaped
(:func:`harness.model_proxy.pinning.label`) and at most :data:`MAX_MODEL_ENTRIES` kept.

Scrubbing: every string has the values of the run's secret variables (``--agent-env``)
redacted, and fields named like credentials (``api_key``, ``authorization``, ``secret``,
``password``) are replaced. The file is bounded (:data:`MAX_EVENTS_BYTES`); each batch is
one append of whole lines, so a crash can leave at most one torn last line, which readers
skip.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from harness.agents.gateway.checkpoint import EVENTS_NAME as EVENTS_NAME
from harness.agents.gateway.checkpoint import AgentFolder
from harness.agents.gateway.errors import GatewayError
from harness.agents.gateway.http import GatewayHTTP, RetryableError, describe_exc
from harness.core.models import ModelCalls
from harness.core.untrusted import read_untrusted_text
from harness.model_proxy.pinning import ModelPin, label
from harness.run.secrets import SecretScanner, redact_json

log = logging.getLogger(__name__)

MAX_EVENTS_BYTES = 16 << 20
MODELS_SOURCE = "gateway_server"
MAX_MODEL_ENTRIES = 20  # distinct model names kept; the rest share OTHER_MODELS
OTHER_MODELS = "(other models)"
UNNAMED = "(not named)"
UNSUPPORTED_STATUS = (404, 405, 501)
_CREDENTIAL_KEY = re.compile(r"(?i)(api[_-]?key|authorization|secret|password|bearer|cookie)")
REDACTED = "[redacted]"


class EventsState(BaseModel):
    """What the copy did so far (saved in ``task_checkpoint.json``)."""

    state: str = "pending"  # pending | copying | unsupported | format_unknown | full
    cursor: str | int | None = None
    copied: int = 0
    bytes: int = 0
    usage_observed: bool = False
    usage_cost_usd: float = 0.0  # the costs ``llm_usage`` records reported (the limit's view)
    last_error: str | None = None


def usage_with_tokens(event: Any) -> bool:
    """An ``llm_usage`` record that reports tokens (the upstream ``paid_activity`` rule)."""
    if not isinstance(event, dict):
        return False
    kind = event.get("type") or event.get("kind") or event.get("event")
    body = event.get("llm_usage") if isinstance(event.get("llm_usage"), dict) else None
    if kind != "llm_usage" and body is None:
        return False
    places = [event, body or {}, event.get("usage") or {}, event.get("data") or {}]
    return any(isinstance(place, dict) and isinstance(place.get(key), int | float)
               and place[key] > 0
               for place in places
               for key in ("prompt_tokens", "completion_tokens", "total_tokens",
                           "input_tokens", "output_tokens"))


def usage_cost(event: Any) -> float:
    """The USD cost an ``llm_usage`` record reports (``cost_usd`` or ``cost``), else 0."""
    if not isinstance(event, dict):
        return 0.0
    kind = event.get("type") or event.get("kind") or event.get("event")
    body = event.get("llm_usage") if isinstance(event.get("llm_usage"), dict) else None
    if kind != "llm_usage" and body is None:
        return 0.0
    for place in (event, body or {}, event.get("usage") or {}, event.get("data") or {}):
        if not isinstance(place, dict):
            continue
        for key in ("cost_usd", "cost"):
            value = place.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
                return _as_float(value)
    return 0.0


def _as_float(value: int | float) -> float:
    """``value`` as a float; an int past a float's range (the server's JSON may hold one)
    is infinite, never an ``OverflowError`` in the poll loop."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _usage_places(event: Any) -> list[dict[str, Any]] | None:
    """The parts of an ``llm_usage`` record that may hold its fields; None for another."""
    if not isinstance(event, dict):
        return None
    kind = event.get("type") or event.get("kind") or event.get("event")
    body = event.get("llm_usage") if isinstance(event.get("llm_usage"), dict) else None
    if kind != "llm_usage" and body is None:
        return None
    return [p for p in (event, body, event.get("usage"), event.get("data"))
            if isinstance(p, dict)]


def _first(places: list[dict[str, Any]], keys: tuple[str, ...],
           kind: type | tuple[type, ...]) -> Any:
    for place in places:
        for key in keys:
            value = place.get(key)
            if isinstance(value, kind) and not isinstance(value, bool):
                return value
    return None


def add_usage(models: dict[str, ModelCalls], event: Any) -> None:
    """Count an ``llm_usage`` record into ``models`` (by model name; other events: no-op)."""
    places = _usage_places(event)
    if places is None:
        return
    name = _first(places, ("model",), str)
    key = label(name) if isinstance(name, str) and name.strip() else UNNAMED
    if key not in models and len(models) >= MAX_MODEL_ENTRIES:
        key = OTHER_MODELS
    entry = models.setdefault(key, ModelCalls(model=key, source=MODELS_SOURCE, prompt_tokens=0,
                                              completion_tokens=0, cost_usd=0.0))
    entry.calls += 1
    prompt = _first(places, ("prompt_tokens", "input_tokens"), int)
    completion = _first(places, ("completion_tokens", "output_tokens"), int)
    entry.prompt_tokens = (entry.prompt_tokens or 0) + max(prompt or 0, 0)
    entry.completion_tokens = (entry.completion_tokens or 0) + max(completion or 0, 0)
    cost = _first(places, ("cost_usd", "cost"), (int, float))
    if cost is None or not math.isfinite(_as_float(cost)) or cost < 0:
        entry.cost_usd = None  # unknown from now on, never 0
    elif entry.cost_usd is not None:
        entry.cost_usd = round(entry.cost_usd + float(cost), 12)


def models_called(models: dict[str, ModelCalls], pin: ModelPin | None) -> list[ModelCalls] | None:
    """The row's ``models`` from the tallies; ``allowed`` per the pin (``--solve-model``,
    ``--allow-model``; every model without one; the names past :data:`MAX_MODEL_ENTRIES`
    not). None when no record was seen."""
    if not models:
        return None
    def allowed(name: str) -> bool:  # a record without a name names no other model
        return pin is None or name == UNNAMED or (name != OTHER_MODELS and pin.allows(name))

    return [e.model_copy(update={"allowed": allowed(e.model)}) for e in models.values()]


def _scrub_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: REDACTED if _CREDENTIAL_KEY.search(str(k)) and not isinstance(v, int | float)
                else _scrub_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub_keys(v) for v in value]
    return value


class EventLog:
    """Copies one task's events into the instance folder, a page per call."""

    def __init__(self, client: GatewayHTTP, task_id: str, instance_dir: Path,
                 secrets: Mapping[str, str] | None = None) -> None:
        self.client = client
        self.task_id = task_id
        self.path = AgentFolder(Path(instance_dir)).events
        self.scanner = SecretScanner(dict(secrets or {}))
        self.status = EventsState()
        self.models: dict[str, ModelCalls] = {}  # llm_usage records per model (add_usage)

    def copy(self) -> EventsState:
        """One request for the events past the cursor; append them. Never raises."""
        if self.status.state not in ("pending", "copying"):
            return self.status
        try:
            answer = self.client.task_events(self.task_id, self.status.cursor)
        except (RetryableError, GatewayError) as exc:
            self.status.last_error = describe_exc(exc)
            return self.status
        if answer is None:
            self.status.state = "unsupported"
            return self.status
        events, cursor = self._page(answer)
        if events is None:
            self.status.state = "format_unknown"
            return self.status
        self.status.state = "copying"
        if events:
            try:
                self._append(events)
            except OSError as exc:
                self.status.last_error = describe_exc(exc)
                return self.status
            self.status.cursor = cursor
        return self.status

    def _page(self, answer: Any) -> tuple[list[Any] | None, str | int | None]:
        if isinstance(answer, list):
            offset = self.status.cursor if isinstance(self.status.cursor, int) else 0
            return answer, offset + len(answer)
        if isinstance(answer, dict) and isinstance(answer.get("events"), list):
            cursor = answer.get("cursor", answer.get("next_cursor"))
            if not isinstance(cursor, str | int) or isinstance(cursor, bool):
                offset = self.status.cursor if isinstance(self.status.cursor, int) else 0
                cursor = offset + len(answer["events"])
            return answer["events"], cursor
        return None, None

    def _append(self, events: list[Any]) -> None:
        lines = []
        size = self.status.bytes
        for event in events:
            if usage_with_tokens(event):
                self.status.usage_observed = True
            self.status.usage_cost_usd += usage_cost(event)
            add_usage(self.models, event)
            clean = redact_json(_scrub_keys(event), self.scanner)
            line = json.dumps(clean, sort_keys=True, ensure_ascii=False).encode() + b"\n"
            if size + len(line) > MAX_EVENTS_BYTES:
                self.status.state = "full"
                break
            lines.append(line)
            size += len(line)
        if not lines:
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, b"".join(lines))
            os.fsync(fd)
        finally:
            os.close(fd)
        self.status.bytes = size
        self.status.copied += len(lines)


def read_events(path: Path) -> list[Any]:
    """The copied events (a torn last line is skipped). The file may sit in an ancestor's
    folder an agent could reach: it is read as untrusted input (a regular file, never a
    link, at most :data:`MAX_EVENTS_BYTES`, the writer's own cap); any other file proves
    nothing (no events)."""
    out = []
    try:
        text = read_untrusted_text(path, MAX_EVENTS_BYTES)
    except OSError as exc:  # absent, a link, a FIFO, too big: no evidence
        if not isinstance(exc, FileNotFoundError):
            log.warning("ignoring events file %s (%s)", path, exc)
        return []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
