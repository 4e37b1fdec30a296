"""The append-only ledger ``result_index.jsonl``: one JSON row per settled instance.

Writing: one line per row, flushed and fsynced, appended at the run root and copied to the
instance's own folder (the copy is written but not fsynced: every reader, and a resume after
a power loss, reads the run root's ledger). A row carried from an ancestor (already durable
there) is written at once and fsynced with the next row, within :data:`GROUP_SYNC_S`, or when
the run finalizes: a resume of thousands of settled instances pays one fsync, not one each.
Only the controller writes. A write that fails is a diagnostic, not
the end of the run: ``diagnostic_write_failed`` goes to stderr, the line is kept in memory
(in order, per file) and retried before the next line and at finish. Reading: a torn last line (a crash in
the middle of a write) is skipped; garbage anywhere else is an error naming the line; the
last row for an instance wins; the denominator comes from the manifest, never from here.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from harness.core.fsutil import append_line
from harness.core.models import TaskRow

LEDGER_NAME = "result_index.jsonl"
GROUP_SYNC_S = 0.5  # the longest a carried row waits for its fsync


class LedgerError(ValueError):
    """The ledger is corrupt somewhere other than a torn last line."""


@dataclass
class LedgerRead:
    rows: list[TaskRow] = field(default_factory=list)
    torn_tail: bool = False

    @property
    def latest(self) -> dict[str, TaskRow]:
        """The last row per instance key ("benchmark/instance_id")."""
        out: dict[str, TaskRow] = {}
        for row in self.rows:
            out[row.key] = row
        return out


def ledger_path(run_root: Path) -> Path:
    return Path(run_root) / LEDGER_NAME


def instance_dir(run_root: Path, benchmark: str, instance_id: str) -> Path:
    return Path(run_root) / benchmark / instance_id


def parse_lines(lines: Iterable[str], source: str = "ledger") -> LedgerRead:
    result = LedgerRead()
    pending: list[tuple[int, str]] = list(enumerate(lines, start=1))
    # Drop trailing blank lines so "last line" means the last line with content.
    while pending and not pending[-1][1].strip():
        pending.pop()
    last = len(pending)
    for index, (lineno, text) in enumerate(pending, start=1):
        if not text.strip():
            continue
        try:
            data = json.loads(text)
            row = TaskRow.model_validate(data)
        except (json.JSONDecodeError, ValidationError) as exc:
            if index == last and not text.endswith("\n"):
                result.torn_tail = True
                break
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "not a ledger row"
            raise LedgerError(
                f"{source}: line {lineno} is corrupt ({reason}); restore the file from a copy "
                f"or move the bad line out, then retry"
            ) from exc
        result.rows.append(row)
    return result


def read_ledger(path: Path) -> LedgerRead:
    """Read a ledger tolerantly; a missing file is an empty ledger."""
    path = Path(path)
    if not path.exists():
        return LedgerRead()
    with open(path, encoding="utf-8", newline="") as fh:
        lines = fh.read().splitlines(keepends=True)
    return parse_lines(lines, source=str(path))


@dataclass
class Tally:
    """Counts by status and outcome, and the mean score, over a selection."""

    counts: dict[str, int]
    outcome_counts: dict[str, int]
    mean_score: float | None


def tally(selection: list[str], latest: dict[str, TaskRow]) -> Tally:
    """The run's figures over its selection (the denominator): a selected instance without a
    row scores 0, and each row's score follows the report's rule (one rule everywhere)."""
    from harness.core.scoring import row_score  # the one rule, shared with the report

    rows = [latest[k] for k in selection if k in latest]
    counts = Counter(r.status for r in rows)
    outcomes = Counter(r.outcome.value for r in rows)
    mean = (sum(row_score(latest[k]) if k in latest else 0.0 for k in selection)
            / len(selection)) if selection else None
    return Tally(dict(sorted(counts.items())), dict(sorted(outcomes.items())), mean)


DIAGNOSTIC_WRITE_FAILED = "diagnostic_write_failed"


def report_write_failure(what: str, exc: OSError) -> None:
    """One stderr line for a failed diagnostic write (the run goes on)."""
    sys.stderr.write(f"harness: {DIAGNOSTIC_WRITE_FAILED}: {what}: {exc}\n")
    sys.stderr.flush()


class LedgerWriter:
    """Appends rows at the run root and in each instance folder (controller only)."""

    def __init__(self, run_root: Path) -> None:
        self.run_root = Path(run_root)
        self.path = ledger_path(self.run_root)
        self.pending: dict[Path, list[str]] = {}  # lines not written yet, per file, in order
        self.failures = 0
        self.unsynced_since: float | None = None  # a carried row written, not yet fsynced

    @property
    def unwritten(self) -> int:
        """Lines of the run-root ledger still held in memory."""
        return len(self.pending.get(self.path, []))

    def append(self, row: TaskRow, *, durable: bool = True) -> bool:
        """Write ``row`` at the run root and in its instance folder; False when some write
        failed (reported, kept and retried: see the module doc). ``durable=False`` (a row
        carried from an ancestor): fsynced with the next row, see :meth:`sync`."""
        line = row.dump_line()
        if "\n" in line:
            raise ValueError("a ledger line must not contain a newline")
        copy = instance_dir(self.run_root, row.benchmark, row.instance_id) / LEDGER_NAME
        ok = True
        for path in (self.path, copy):
            self.pending.setdefault(path, []).append(line)
            ok = self._flush(path, durable=durable or path != self.path) and ok
        if self.unsynced_since is not None and (
                durable or time.monotonic() - self.unsynced_since > GROUP_SYNC_S):
            self.sync()
        return ok

    def sync(self) -> None:
        """fsync the run root's ledger (the carried rows written since the last fsync)."""
        if self.unsynced_since is None:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            report_write_failure(f"{self.path} (fsync)", exc)
            return
        self.unsynced_since = None

    def flush_pending(self) -> int:
        """Retry every held line; returns how many run-root lines are still unwritten."""
        for path in list(self.pending):
            self._flush(path)
        self.sync()
        return self.unwritten

    def _flush(self, path: Path, durable: bool = True) -> bool:
        lines = self.pending.get(path, [])
        while lines:
            try:
                if path != self.path:
                    _append_copy(path, lines[0])
                elif durable:
                    append_line(path, lines[0])  # fsyncs the carried rows before it too
                    self.unsynced_since = None
                else:
                    _append_copy(path, lines[0])
                    if self.unsynced_since is None:
                        self.unsynced_since = time.monotonic()
            except OSError as exc:
                self.failures += 1
                report_write_failure(f"{path} ({len(lines)} row(s) kept in memory)", exc)
                return False
            lines.pop(0)
        self.pending.pop(path, None)
        return True


def _append_copy(path: Path, line: str) -> None:
    """Append a line to an instance folder's copy of the ledger: written, not fsynced."""
    data = (line + "\n").encode("utf-8")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
