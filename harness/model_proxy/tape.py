"""Record and replay at the model gateway: ``--model-record DIR`` stores every exchange of
every instance; ``--model-replay DIR`` serves every call from those records and never
contacts an upstream (issue 28).

**The key of a call** (:func:`request_key`) is the SHA-256 of, in UTF-8::

    harness.model_tape.key.v1\\n<METHOD> <route>\\n<canonical body>

``route`` is the path under ``/v1/`` (``chat/completions``, ``messages``, ``models``, ...).
The canonical body is the JSON body *as the gateway forwards it* (after the pin replaced the
model by its declared spelling: :mod:`harness.model_proxy.pinning`) with the top-level keys
of :data:`VOLATILE_KEYS` removed (``stream_options``, ``user``, ``metadata``, ``request_id``,
``idempotency_key``, ``store``, ``safety_identifier``, ``prompt_cache_key``,
``service_tier``: bookkeeping, routing and caching hints that do not change the answer),
serialized with sorted keys, no whitespace (``","`` and ``":"``) and ASCII escapes
(``json.dumps(..., sort_keys=True, separators=(",", ":"), ensure_ascii=True)``); a body-less
call (``GET models``) has ``null``. Everything else counts, at any depth: ``model``,
``messages``, ``tools``, ``tool_choice``, ``stream``, ``temperature``, ``max_tokens``,
``seed``, ``stop``, ``response_format`` and any parameter this list does not name (an unknown
parameter is assumed to change the answer). Headers never count (request ids, retry counts,
SDK versions, credentials), nor the query string.

**On disk** (every file a pydantic model of this module)::

    DIR/tape.json                               TapeInfo: format and key rule
    DIR/records/<ab>/<sha256>.json              TapeRecord: one exchange, named by the
                                                SHA-256 of its own bytes (content-addressed,
                                                published whole or not at all: hard link)
    DIR/instances/<benchmark>/<instance>.json   TapeIndex: the instance's calls in call order
                                                (written atomically when its agent ends; a
                                                new run of the instance replaces it)
    DIR/instances/<benchmark>/<instance>.calls.jsonl   the calls so far while it runs (read
                                                when the run died before its index)

A record holds the request (the forwarded body), the response as the agent received it
(status, content type, the body, or a stream's server-sent events in order plus any bytes
after the last one), the usage read from it, and the cost metered then with its source.
Credentials never reach a record: no header is stored, and every occurrence of the
provider key (and of a per-instance gateway token) in a body or an event is replaced by
:data:`REDACTED` before the record is hashed. Recording changes nothing the agent sees: the
response is relayed exactly as without it, and written after it was sent.

**Replay** (:class:`TapeSession` in ``replay`` mode), per instance, the calls numbered from
1 in arrival order:

* ``strict`` (the default): a call is served the response recorded for a call with the same
  key (among several, the one recorded first and not yet served); a call with no such record
  gets HTTP 409 ``replay_miss`` naming the instance and the call's position (header
  ``x-should-retry: false``, so SDKs do not retry it), and the agent's row fails with
  ``replay_miss``;
* ``sequence``: call N is served the instance's N-th recorded response whatever it asks
  (for agents that stamp the time into their prompts); each call whose key differs from the
  recorded one is a divergence, kept with its first difference. Past the last record, or
  when call N is streamed and the record is not (or the route differs), it is a miss.

A replayed call costs $0 (``cost_source: replay`` on the row; the cost metered at recording
is kept as ``original_cost_usd``); a per-task limit still counts the recorded cost, so a
replay stops where the recording stopped. ``model_replay.json`` in the instance folder
(:class:`ReplayReport`) lists every call served, every divergence, and the misses (the first
:data:`MAX_REPORT_MISSES`; ``missed_calls`` counts them all: an agent calling on after a miss
cannot grow the file or the harness's memory without bound).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.core.fsutil import atomic_write_json, create_exclusive
from harness.model_proxy.usage import CallCost, CallUsage

KEY_RULE = "harness.model_tape.key.v1"
TAPE_SCHEMA = "harness.model_tape.v1"
VOLATILE_KEYS = frozenset(
    {
        "stream_options",
        "user",
        "metadata",
        "request_id",
        "idempotency_key",
        "store",
        "safety_identifier",
        "prompt_cache_key",
        "service_tier",
    }
)
REDACTED = "[harness:redacted-secret]"
MIN_SECRET = 8  # shorter strings are not scrubbed (a placeholder, not a key)
MISS_CODE = "replay_miss"
REPORT_NAME = "model_replay.json"
INFO_NAME = "tape.json"
MAX_ROW_ITEMS = 20  # divergences and misses listed in the row (more in the report file)
MAX_REPORT_MISSES = 1000  # misses listed in model_replay.json (all counted)
MAX_DIFF = 240  # characters of a first difference
# One instance's recording budget (issue 40): past either, the gateway refuses the next call
# (402 ``record_budget_reached``) rather than serve what it would not keep.
MAX_RECORD_BYTES = 64 << 20
MAX_RECORD_CALLS = 2000
RECORD_BUDGET_CODE = "record_budget_reached"

Mode = Literal["record", "replay"]
Order = Literal["strict", "sequence"]
ORDERS: tuple[Order, ...] = ("strict", "sequence")


# --- the key ----------------------------------------------------------------------------
def canonical_body(body: Any) -> Any:
    """The body the key is taken over: top-level :data:`VOLATILE_KEYS` removed."""
    if isinstance(body, dict):
        return {k: v for k, v in body.items() if k not in VOLATILE_KEYS}
    return body


def canonical_text(body: Any) -> str:
    return json.dumps(
        canonical_body(body), sort_keys=True, separators=(",", ":"), ensure_ascii=True
    )


def request_key(method: str, route: str, body: Any) -> str:
    """The call's key: see the module's docstring for the exact rule."""
    text = f"{KEY_RULE}\n{method.upper()} {route}\n{canonical_text(body)}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def first_difference(got: Any, want: Any, path: str = "") -> str | None:
    """Where two canonical bodies first differ, as ``path: what`` (bounded), None if equal."""
    where = path or "(body)"
    if type(got) is not type(want) and not (
        isinstance(got, (int, float))
        and isinstance(want, (int, float))
        and not isinstance(got, bool)
        and not isinstance(want, bool)
    ):
        return _bounded(f"{where}: {type(got).__name__} where the record has {type(want).__name__}")
    if isinstance(got, dict):
        for key in sorted(set(got) | set(want)):
            sub = f"{path}.{key}" if path else str(key)
            if key not in want:
                return _bounded(f"{sub}: not in the record")
            if key not in got:
                return _bounded(f"{sub}: missing (the record has it)")
            found = first_difference(got[key], want[key], sub)
            if found is not None:
                return found
        return None
    if isinstance(got, list):
        for i, (a, b) in enumerate(zip(got, want, strict=False)):
            found = first_difference(a, b, f"{path}[{i}]")
            if found is not None:
                return found
        if len(got) != len(want):
            return _bounded(f"{where}: {len(got)} items, the record has {len(want)}")
        return None
    if isinstance(got, str):
        if got == want:
            return None
        i = next(
            (n for n, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
            min(len(got), len(want)),
        )
        lo = max(0, i - 30)
        return _bounded(
            f"{where}: character {i}: {got[lo : i + 30]!r} where the record has "
            f"{want[lo : i + 30]!r}"
        )
    if got != want:
        return _bounded(f"{where}: {got!r} where the record has {want!r}")
    return None


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_DIFF else text[: MAX_DIFF - 3] + "..."


# --- files ------------------------------------------------------------------------------
class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class TapeInfo(_Model):
    """``tape.json``: what wrote the directory and how its keys are taken."""

    schema_: str = Field(default=TAPE_SCHEMA, alias="schema")
    key_rule: str = KEY_RULE
    volatile_keys: list[str] = Field(default_factory=lambda: sorted(VOLATILE_KEYS))
    created_at: str


class TapeRequest(_Model):
    method: str
    route: str
    body: Any = None  # the JSON body forwarded (credentials redacted), None without one


class TapeResponse(_Model):
    """What the agent received. ``encoding`` applies to ``body``, ``events`` and ``tail``:
    ``utf-8`` text, or ``base64`` when some part was not UTF-8."""

    status: int
    content_type: str
    encoding: Literal["utf-8", "base64"] = "utf-8"
    body: str | None = None  # a plain response
    events: list[str] | None = None  # a stream: each event without its blank line
    tail: str | None = None  # a stream: the bytes after its last whole event

    @property
    def stream(self) -> bool:
        return self.events is not None

    def _bytes(self, text: str | None) -> bytes:
        if text is None:
            return b""
        return base64.b64decode(text) if self.encoding == "base64" else text.encode("utf-8")

    def body_bytes(self) -> bytes:
        return self._bytes(self.body)

    def event_bytes(self) -> list[bytes]:
        return [self._bytes(e) for e in self.events or []]

    def tail_bytes(self) -> bytes:
        return self._bytes(self.tail)


class TapeUsage(_Model):
    seen: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    provider_cost_usd: float | None = None
    model: str | None = None

    @classmethod
    def of(cls, usage: CallUsage) -> TapeUsage:
        return cls(
            seen=usage.seen,
            prompt_tokens=usage.prompt,
            completion_tokens=usage.completion,
            cached_tokens=usage.cached,
            provider_cost_usd=usage.provider_cost,
            model=usage.model,
        )

    def call_usage(self) -> CallUsage:
        return CallUsage(
            prompt=self.prompt_tokens,
            completion=self.completion_tokens,
            cached=self.cached_tokens,
            provider_cost=self.provider_cost_usd,
            model=self.model,
            seen=self.seen,
        )


class TapeRecord(_Model):
    """``records/<ab>/<sha256>.json``: one exchange."""

    schema_: str = Field(default="harness.model_tape.record.v1", alias="schema")
    key: str
    request: TapeRequest
    response: TapeResponse
    model: str | None = None  # the model asked (as forwarded)
    usage: TapeUsage | None = None  # None: not metered (GET models, an error)
    cost_usd: float | None = None  # metered when recorded (None: unknown or not metered)
    cost_source: str = "not_metered"  # provider | prices | unpriced | usage_missing | ...
    upstream_error: bool = False  # the gateway's own 502, or a 5xx, or a stream cut
    redacted: int = 0  # secrets replaced by REDACTED
    # Why the exchange could not be stored (a body nested past the serializer's depth): the
    # record is then a stub (key, the body's sha256, status), never served by a replay
    unrecordable: str | None = None


class TapeCall(_Model):
    """One call of an instance's index."""

    position: int
    key: str
    record: str  # the record's SHA-256
    method: str
    route: str
    stream: bool
    status: int
    # when the call came (epoch s) and how long until its answer ended, its waits for the
    # provider (429s, retries) included; None on tapes recorded before they were kept
    started_at: float | None = None
    latency_s: float | None = None
    # its share of the provider's pushback: 429s, retries, seconds waited, stalls
    trouble: dict[str, float] | None = None


class TapeIndex(_Model):
    """``instances/<benchmark>/<instance>.json``: an instance's calls in call order."""

    schema_: str = Field(default="harness.model_tape.index.v1", alias="schema")
    benchmark: str
    instance_id: str
    complete: bool = True  # False: read from the journal of a run that died
    recorded_at: str
    calls: list[TapeCall] = Field(default_factory=list)


class ReplayServed(_Model):
    position: int
    key: str
    record: str
    recorded_position: int


class ReplayMiss(_Model):
    position: int
    key: str
    reason: str
    first_difference: str | None = None  # against the call recorded at this position


class ReplayDivergence(_Model):
    position: int
    key: str
    recorded_key: str
    first_difference: str | None = None


class ReplayReport(_Model):
    """``model_replay.json`` in the instance folder."""

    schema_: str = Field(default="harness.model_tape.replay.v1", alias="schema")
    records: str
    order: Order
    benchmark: str
    instance_id: str
    recorded_calls: int
    recording_complete: bool
    calls: int = 0
    served: list[ReplayServed] = Field(default_factory=list)
    misses: list[ReplayMiss] = Field(default_factory=list)  # the first MAX_REPORT_MISSES
    missed_calls: int = 0  # every miss, listed or not
    divergences: list[ReplayDivergence] = Field(default_factory=list)
    original_cost_usd: float | None = 0.0  # what the served calls cost when recorded
    original_cost_known: bool = True


# --- the directory ----------------------------------------------------------------------
class TapeError(ValueError):
    """A records directory that cannot be used (one line, naming the fix)."""


@dataclass(frozen=True)
class TapeConfig:
    """``--model-record DIR`` or ``--model-replay DIR`` (with ``--replay-order``)."""

    mode: Mode
    directory: Path
    order: Order = "strict"
    max_bytes: int = MAX_RECORD_BYTES  # per instance
    max_calls: int = MAX_RECORD_CALLS  # per instance

    def prepare(self) -> None:
        """Record: create the directory and its ``tape.json``; replay: check it is one.
        :class:`TapeError` otherwise."""
        info = self.directory / INFO_NAME
        if self.mode == "replay":
            if not info.is_file():
                raise TapeError(
                    f"--model-replay {self.directory}: not a records directory "
                    f"(no {INFO_NAME}); give the DIR a --model-record run wrote"
                )
            try:
                found = TapeInfo.model_validate_json(info.read_bytes())
            except (OSError, ValueError) as exc:
                raise TapeError(
                    f"--model-replay {self.directory}: {INFO_NAME} is "
                    f"unreadable ({type(exc).__name__})"
                ) from None
            if found.key_rule != KEY_RULE:
                raise TapeError(
                    f"--model-replay {self.directory}: recorded with key rule "
                    f"{found.key_rule!r}, this harness uses {KEY_RULE!r}"
                )
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            if not info.exists():
                create_exclusive(
                    info,
                    (
                        TapeInfo(created_at=_now()).model_dump_json(by_alias=True, indent=2) + "\n"
                    ).encode(),
                )
        except OSError as exc:
            raise TapeError(
                f"--model-record {self.directory}: cannot write there ({exc.strerror or exc})"
            ) from None


def _stub(record: TapeRecord, body: Any, exc: BaseException) -> TapeRecord:
    """What is kept of an exchange that cannot be stored whole: its key, the sha256 of its
    body as forwarded, its status and why."""
    try:
        digest = hashlib.sha256(canonical_text(body).encode("utf-8")).hexdigest()
    except (ValueError, RecursionError, TypeError):
        digest = None
    reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}" if str(exc) else (
        type(exc).__name__)
    return TapeRecord(
        key=record.key,
        request=TapeRequest(method=record.request.method, route=record.request.route,
                            body={"body_sha256": digest}),
        response=TapeResponse(status=record.response.status,
                              content_type=record.response.content_type),
        model=record.model, usage=record.usage, cost_usd=record.cost_usd,
        cost_source=record.cost_source, upstream_error=record.upstream_error,
        redacted=record.redacted, unrecordable=reason)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def index_path(directory: Path, benchmark: str, instance_id: str) -> Path:
    return Path(directory) / "instances" / benchmark / f"{instance_id}.json"


def journal_path(directory: Path, benchmark: str, instance_id: str) -> Path:
    return Path(directory) / "instances" / benchmark / f"{instance_id}.calls.jsonl"


def record_path(directory: Path, digest: str) -> Path:
    return Path(directory) / "records" / digest[:2] / f"{digest}.json"


def read_index(directory: Path, benchmark: str, instance_id: str) -> TapeIndex | None:
    """The instance's index; from its journal when the recording died before the index;
    None when the instance was never recorded."""
    path = index_path(directory, benchmark, instance_id)
    if path.is_file():
        return TapeIndex.model_validate_json(path.read_bytes())
    journal = journal_path(directory, benchmark, instance_id)
    if not journal.is_file():
        return None
    calls: list[TapeCall] = []
    for line in journal.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError):  # a torn last line
            calls.append(TapeCall.model_validate_json(line))
    calls.sort(key=lambda c: c.position)
    return TapeIndex(
        benchmark=benchmark,
        instance_id=instance_id,
        complete=False,
        recorded_at=_now(),
        calls=calls,
    )


def read_record(directory: Path, digest: str) -> TapeRecord:
    """The record named ``digest``; ValueError when it is missing or not what it is named."""
    try:
        data = record_path(directory, digest).read_bytes()
    except OSError as exc:
        raise ValueError(f"record {digest[:16]} is unreadable ({exc.strerror})") from None
    if hashlib.sha256(data).hexdigest() != digest:
        raise ValueError(f"record {digest[:16]} does not match its name (altered)")
    return TapeRecord.model_validate_json(data)


# --- scrubbing --------------------------------------------------------------------------
def _scrub_text(text: str, secrets: list[str]) -> tuple[str, int]:
    count = 0
    for secret in secrets:
        for form in {secret, json.dumps(secret)[1:-1]}:
            if form in text:
                count += text.count(form)
                text = text.replace(form, REDACTED)
    return text, count


def _scrub_json(value: Any, secrets: list[str]) -> tuple[Any, int]:
    if isinstance(value, str):
        return _scrub_text(value, secrets)
    if isinstance(value, list):
        out, total = [], 0
        for item in value:
            new, n = _scrub_json(item, secrets)
            out.append(new)
            total += n
        return out, total
    if isinstance(value, dict):
        result: dict[str, Any] = {}
        total = 0
        for key, item in value.items():
            new_key, n1 = _scrub_text(str(key), secrets)
            new, n2 = _scrub_json(item, secrets)
            result[new_key] = new
            total += n1 + n2
        return result, total
    return value, 0


def _encode(parts: list[bytes], secrets: list[str]) -> tuple[str, list[str], int]:
    """The parts as text of one encoding (utf-8, else base64), secrets replaced."""
    raw = [s.encode("utf-8") for s in secrets]
    count = 0
    scrubbed: list[bytes] = []
    for part in parts:
        for secret in raw:
            if secret in part:
                count += part.count(secret)
                part = part.replace(secret, REDACTED.encode())
        scrubbed.append(part)
    try:
        return "utf-8", [p.decode("utf-8") for p in scrubbed], count
    except UnicodeDecodeError:
        return "base64", [base64.b64encode(p).decode("ascii") for p in scrubbed], count


# --- one instance -----------------------------------------------------------------------
@dataclass
class Served:
    record: TapeRecord
    position: int


@dataclass
class Missed:
    position: int
    message: str


_CURRENT: ContextVar[TapeSession | None] = ContextVar("harness_model_tape", default=None)


def current_tape() -> TapeSession | None:
    """The session of the instance whose agent this thread runs (:func:`instance_tape`)."""
    return _CURRENT.get()


@contextlib.contextmanager
def instance_tape(session: TapeSession | None) -> Iterator[TapeSession | None]:
    """Make ``session`` the current one while the instance's agent runs (a gateway started
    meanwhile in this thread records or replays through it), and close it at the end."""
    token = _CURRENT.set(session)
    try:
        yield session
    finally:
        _CURRENT.reset(token)
        if session is not None:
            session.close()


class TapeSession:
    """The calls of one instance, recorded or replayed; shared by every gateway the
    instance's agent starts (the positions run on across them)."""

    def __init__(
        self, config: TapeConfig, benchmark: str, instance_id: str, instance_dir: Path | None = None
    ) -> None:
        self.config = config
        self.benchmark = benchmark
        self.instance_id = instance_id
        self.instance_dir = None if instance_dir is None else Path(instance_dir)
        self._lock = threading.Lock()
        self._secrets: list[str] = []
        self._position = 0
        self._closed = False
        self.calls: list[TapeCall] = []  # recorded so far (record mode)
        self.recorded_bytes = 0  # the records this instance wrote
        self.unrecordable = 0  # exchanges kept as stubs (TapeRecord.unrecordable)
        self.over_budget = 0  # calls refused past the recording budget
        self.report: ReplayReport | None = None
        self._index: TapeIndex | None = None
        self._by_key: dict[str, deque[TapeCall]] = {}
        self._original: float = 0.0
        self._original_unknown = 0
        if config.mode == "record":
            for path in (
                index_path(config.directory, benchmark, instance_id),
                journal_path(config.directory, benchmark, instance_id),
            ):
                path.unlink(missing_ok=True)  # a new run of the instance replaces the old
        else:
            self._index = read_index(config.directory, benchmark, instance_id)
            for call in self.recorded:
                self._by_key.setdefault(call.key, deque()).append(call)
            self.report = ReplayReport(
                records=str(config.directory),
                order=config.order,
                benchmark=benchmark,
                instance_id=instance_id,
                recorded_calls=len(self.recorded),
                recording_complete=self._index is not None and self._index.complete,
            )

    @property
    def recording(self) -> bool:
        return self.config.mode == "record"

    @property
    def replaying(self) -> bool:
        return self.config.mode == "replay"

    @property
    def recorded(self) -> list[TapeCall]:
        return [] if self._index is None else self._index.calls

    @property
    def label(self) -> str:
        return f"{self.benchmark}/{self.instance_id}"

    def add_secret(self, secret: str | None) -> None:
        """A string no record may hold (the provider key, a gateway token)."""
        if secret and len(secret) >= MIN_SECRET and secret not in self._secrets:
            with self._lock:
                self._secrets.append(secret)
                self._secrets.sort(key=len, reverse=True)  # longest first

    def next_position(self) -> int:
        with self._lock:
            self._position += 1
            return self._position

    # -- record ----------------------------------------------------------------------
    def budget_refusal(self) -> str | None:
        """Past the instance's recording budget: why (and the refusal is counted), else
        None. A call refused here is never served, so nothing served goes unrecorded."""
        if not self.recording:
            return None
        with self._lock:
            calls, size = len(self.calls), self.recorded_bytes
            over = calls >= self.config.max_calls or size >= self.config.max_bytes
            if over:
                self.over_budget += 1
        if not over:
            return None
        return (f"{RECORD_BUDGET_CODE}: instance {self.label} has recorded {calls} calls and "
                f"{size} bytes, its budget is {self.config.max_calls} calls and "
                f"{self.config.max_bytes} bytes")

    def record(
        self,
        position: int,
        method: str,
        route: str,
        body: Any,
        *,
        status: int,
        content_type: str,
        data: bytes | None = None,
        events: list[bytes] | None = None,
        tail: bytes = b"",
        usage: CallUsage | None = None,
        cost: CallCost | None = None,
        model: str | None = None,
        upstream_error: bool = False,
        started_at: float | None = None,
        latency_s: float | None = None,
        trouble: dict[str, float] | None = None,
    ) -> str:
        """Store one exchange (after the agent got its response); returns its digest."""
        key = request_key(method, route, body)
        secrets = list(self._secrets)
        scrubbed_body, n_req = _scrub_json(body, secrets) if secrets else (body, 0)
        if events is None:
            encoding, texts, n_resp = _encode([data or b""], secrets)
            response = TapeResponse(
                status=status,
                content_type=content_type,
                encoding=encoding,  # type: ignore[arg-type]
                body=texts[0],
            )
        else:
            encoding, texts, n_resp = _encode([*events, tail], secrets)
            response = TapeResponse(
                status=status,
                content_type=content_type,
                encoding=encoding,  # type: ignore[arg-type]
                events=texts[:-1],
                tail=texts[-1] or None,
            )
        record = TapeRecord(
            key=key,
            request=TapeRequest(method=method, route=route, body=scrubbed_body),
            response=response,
            model=model,
            usage=None if usage is None else TapeUsage.of(usage),
            cost_usd=None if cost is None else cost.cost_usd,
            cost_source="not_metered" if cost is None else cost.source,
            upstream_error=upstream_error,
            redacted=n_req + n_resp,
        )
        try:
            data_out = record.model_dump_json(by_alias=True).encode("utf-8")
        except (ValueError, RecursionError, TypeError) as exc:  # nested past the serializer
            data_out = _stub(record, body, exc).model_dump_json(by_alias=True).encode("utf-8")
            with self._lock:
                self.unrecordable += 1
        digest = hashlib.sha256(data_out).hexdigest()
        create_exclusive(record_path(self.config.directory, digest), data_out)
        call = TapeCall(
            position=position,
            key=key,
            record=digest,
            method=method,
            route=route,
            stream=events is not None,
            status=status,
            started_at=started_at,
            latency_s=latency_s,
            trouble=dict(trouble) if trouble else None,
        )
        journal = journal_path(self.config.directory, self.benchmark, self.instance_id)
        with self._lock:
            self.recorded_bytes += len(data_out)
            self.calls.append(call)
            journal.parent.mkdir(parents=True, exist_ok=True)
            with journal.open("a", encoding="utf-8") as fh:
                fh.write(call.model_dump_json() + "\n")
        return digest

    # -- replay ----------------------------------------------------------------------
    def replay(self, method: str, route: str, body: Any, stream: bool) -> Served | Missed:
        """The recorded response for this call, or why there is none."""
        key = request_key(method, route, body)
        report = self.report
        assert report is not None
        with self._lock:
            self._position += 1
            position = self._position
            report.calls = position
            entry: TapeCall | None = None
            reason: str | None = None
            if self.config.order == "strict":
                queue = self._by_key.get(key)
                if queue:
                    entry = queue.popleft()
                else:
                    reason = "no record of this request"
            else:
                recorded = self.recorded
                entry = recorded[position - 1] if position <= len(recorded) else None
                if entry is None:
                    reason = f"the recording has {len(recorded)} calls"
                elif (entry.method, entry.route, entry.stream) != (method, route, stream):
                    reason = (
                        f"recorded call {position} was {entry.method} {entry.route}"
                        f"{' streamed' if entry.stream else ''}, this one is {method} "
                        f"{route}{' streamed' if stream else ''}"
                    )
                    entry = None
        if entry is None:
            if self._count_miss():
                diff = self._difference(position, body)
                with self._lock:
                    report.misses.append(
                        ReplayMiss(
                            position=position, key=key, reason=reason or "", first_difference=diff
                        )
                    )
            return Missed(
                position,
                f"{MISS_CODE}: no recorded response for call {position} "
                f"of instance {self.label} in {self.config.directory} "
                f"({reason}; --replay-order {self.config.order})",
            )
        try:
            record = read_record(self.config.directory, entry.record)
        except ValueError as exc:
            return self._missed(position, key, str(exc), f": {exc}")
        if record.unrecordable is not None:
            return self._missed(position, key, record.unrecordable,
                                f" was not recordable ({record.unrecordable})")
        if entry.key != key:  # sequence order only: served anyway, the divergence kept
            diff = first_difference(canonical_body(body), canonical_body(record.request.body))
            with self._lock:
                report.divergences.append(
                    ReplayDivergence(
                        position=position, key=key, recorded_key=entry.key, first_difference=diff
                    )
                )
        with self._lock:
            report.served.append(
                ReplayServed(
                    position=position,
                    key=key,
                    record=entry.record,
                    recorded_position=entry.position,
                )
            )
            if record.usage is not None or record.cost_source != "not_metered":
                if record.cost_usd is None:
                    self._original_unknown += 1
                else:
                    self._original += record.cost_usd
        return Served(record, position)

    def _missed(self, position: int, key: str, reason: str, said: str) -> Missed:
        """A miss of a recorded call that cannot be served: counted, listed, and told as
        ``replay_miss: call N of instance I<said>``."""
        report = self.report
        assert report is not None
        if self._count_miss():
            with self._lock:
                report.misses.append(ReplayMiss(position=position, key=key, reason=reason))
        return Missed(position, f"{MISS_CODE}: call {position} of instance {self.label}{said}")

    def _count_miss(self) -> bool:
        """Count a miss; True while it is among the first :data:`MAX_REPORT_MISSES` (listed)."""
        report = self.report
        assert report is not None
        with self._lock:
            report.missed_calls += 1
            return report.missed_calls <= MAX_REPORT_MISSES

    def _difference(self, position: int, body: Any) -> str | None:
        """The first difference from the call recorded at ``position`` (None: none there)."""
        recorded = self.recorded
        if position > len(recorded):
            return None
        try:
            record = read_record(self.config.directory, recorded[position - 1].record)
        except ValueError:
            return None
        return first_difference(canonical_body(body), canonical_body(record.request.body))

    @property
    def missed(self) -> bool:
        return self.report is not None and self.report.missed_calls > 0

    # -- the end ---------------------------------------------------------------------
    def close(self) -> None:
        """Write the instance's index (record) or ``model_replay.json`` (replay)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        d = self.config.directory
        if self.recording:
            index = TapeIndex(
                benchmark=self.benchmark,
                instance_id=self.instance_id,
                recorded_at=_now(),
                calls=sorted(self.calls, key=lambda c: c.position),
            )
            atomic_write_json(index_path(d, self.benchmark, self.instance_id), index)
            journal_path(d, self.benchmark, self.instance_id).unlink(missing_ok=True)
            return
        report = self.report
        assert report is not None
        report.original_cost_known = self._original_unknown == 0
        report.original_cost_usd = round(self._original, 12) if report.original_cost_known else None
        if self.instance_dir is not None:
            atomic_write_json(self.instance_dir / REPORT_NAME, report)

    def summary(self) -> dict[str, Any]:
        """What the row's details keep (``model_record`` / ``model_replay``)."""
        d = self.config.directory
        if self.recording:
            return {
                "records": str(d),
                "calls": len(self.calls),
                "bytes": self.recorded_bytes,
                "unrecordable": self.unrecordable,
                "refused_over_budget": self.over_budget,
                "index": str(index_path(d, self.benchmark, self.instance_id).relative_to(d)),
            }
        report = self.report
        assert report is not None
        return {
            "records": str(d),
            "order": report.order,
            "recorded_calls": report.recorded_calls,
            "recording_complete": report.recording_complete,
            "calls": report.calls,
            "served": len(report.served),
            "misses": report.missed_calls,
            "first_misses": [m.model_dump(mode="json") for m in report.misses[:MAX_ROW_ITEMS]],
            "divergences": len(report.divergences),
            "first_divergences": [
                v.model_dump(mode="json") for v in report.divergences[:MAX_ROW_ITEMS]
            ],
            "original_cost_usd": report.original_cost_usd,
            "original_cost_known": report.original_cost_known,
            "report": REPORT_NAME,
        }
