"""Record and replay at the model gateway: ``--model-record DIR`` stores every exchange of
every instance; ``--model-replay DIR`` serves every call from those records and never
contacts an upstream (issue 28).

This module is one instance's session (:class:`TapeSession`): the calls it records and
the calls it replays. The key of a call is :mod:`~harness.model_proxy.tape_key`'s, the
records directory and its files :mod:`~harness.model_proxy.tape_format`'s, and what a
record keeps of an exchange (secrets redacted) :mod:`~harness.model_proxy.tape_scrub`'s;
their names are importable from here too.

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

import contextlib
import hashlib
import threading
from collections import deque
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.fsutil import atomic_write_json, create_exclusive
from harness.model_proxy.tape_format import (  # noqa: F401  (re-exported)
    INFO_NAME,
    MAX_RECORD_BYTES,
    MAX_RECORD_CALLS,
    ORDERS,
    TAPE_SCHEMA,
    Mode,
    Order,
    ReplayDivergence,
    ReplayMiss,
    ReplayReport,
    ReplayServed,
    TapeCall,
    TapeConfig,
    TapeError,
    TapeIndex,
    TapeInfo,
    TapeRecord,
    TapeRequest,
    TapeResponse,
    TapeUsage,
    _now,
    index_path,
    journal_path,
    read_index,
    read_record,
    record_path,
)
from harness.model_proxy.tape_key import (  # noqa: F401  (re-exported)
    KEY_RULE,
    MAX_DIFF,
    VOLATILE_KEYS,
    canonical_body,
    canonical_text,
    first_difference,
    request_key,
)
from harness.model_proxy.tape_scrub import (  # noqa: F401  (re-exported)
    MIN_SECRET,
    REDACTED,
    _encode,
    _scrub_json,
    _scrub_text,
    _stub,
)
from harness.model_proxy.usage import CallCost, CallUsage

MISS_CODE = "replay_miss"
REPORT_NAME = "model_replay.json"
MAX_ROW_ITEMS = 20  # divergences and misses listed in the row (more in the report file)
MAX_REPORT_MISSES = 1000  # misses listed in model_replay.json (all counted)
RECORD_BUDGET_CODE = "record_budget_reached"


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
