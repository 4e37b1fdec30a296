"""The records directory of record and replay (issue 28): its files as pydantic models,
where each one lies, how it is read back, and the directory's configuration.

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
:data:`~harness.model_proxy.tape_scrub.REDACTED` before the record is hashed. Recording changes nothing the agent sees: the
response is relayed exactly as without it, and written after it was sent.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.core.fsutil import create_exclusive
from harness.model_proxy.tape_key import KEY_RULE, VOLATILE_KEYS
from harness.model_proxy.usage import CallUsage

TAPE_SCHEMA = "harness.model_tape.v1"
INFO_NAME = "tape.json"
# One instance's recording budget (issue 40): past either, the gateway refuses the next call
# (402 ``record_budget_reached``) rather than serve what it would not keep.
MAX_RECORD_BYTES = 64 << 20
MAX_RECORD_CALLS = 2000

Mode = Literal["record", "replay"]
Order = Literal["strict", "sequence"]
ORDERS: tuple[Order, ...] = ("strict", "sequence")


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
