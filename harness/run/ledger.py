"""The append-only ledger ``result_index.jsonl``: one JSON row per settled instance.

Writing: one line per row, flushed and fsynced, appended at the run root and copied to the
instance's own folder (the copy is written but not fsynced: every reader, and a resume after
a power loss, reads the run root's ledger). The rows a resume carries from its ancestors are
appended in one batch, one write and one fsync for all of them, before any instance runs;
their instance folders are made and written by a helper process while the run goes on
(:mod:`harness.run.folder_copies`), waited for before the run finishes (:meth:`LedgerWriter.settle`).
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
from typing import TYPE_CHECKING

from pydantic import ValidationError

from harness.core import collector
from harness.core.layout import LEDGER_NAME
from harness.core.models import TaskRow
from harness.run.folder_copies import FolderCopies, append_line

if TYPE_CHECKING:
    from harness.core.models import Manifest, VerdictScore


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
    with collector.paused():  # thousands of rows that live on: no collector pass meanwhile
        return _parse_lines(lines, source)


def _parse_lines(lines: Iterable[str], source: str) -> LedgerRead:
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
            row = _parse_row(text)
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


def _parse_row(text: str) -> TaskRow:
    """One line as a row: parsed and validated in one pass; a line that fails is parsed
    again the plain way, whose error (``json`` or pydantic's) names what is wrong."""
    try:
        return TaskRow.model_validate_json(text)
    except ValidationError:
        return TaskRow.model_validate(json.loads(text))


def set_aside_torn_tail(path: Path) -> dict[str, str | int] | None:
    """Move a torn last line (a crash in the middle of a write) out of the ledger at ``path``
    into ``<ledger>.torn-<time>`` beside it, so the next append starts on a line of its own
    (a torn line followed by a new one would be damage in the middle). Nothing of a row is
    lost: a torn line holds none. Returns what was moved (ledger, saved_to, bytes), or None
    when the last line is whole."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if not data or data.endswith(b"\n"):
        return None
    cut = data.rfind(b"\n") + 1
    tail = data[cut:]
    try:
        _parse_row(tail.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, ValidationError):
        pass
    else:  # a whole row, only its newline missing: completed, kept
        with open(path, "ab") as fh:
            fh.write(b"\n")
            fh.flush()
            os.fsync(fh.fileno())
        return None
    saved = path.with_name(f"{path.name}.torn-{int(time.time() * 1000)}")
    saved.write_bytes(tail)
    with open(path, "r+b") as fh:
        fh.truncate(cut)
        fh.flush()
        os.fsync(fh.fileno())
    return {"ledger": str(path), "saved_to": str(saved), "bytes": len(tail)}


def read_ledger(path: Path) -> LedgerRead:
    """Read a ledger tolerantly; a missing file is an empty ledger."""
    path = Path(path)
    if not path.exists():
        return LedgerRead()
    with open(path, encoding="utf-8", newline="") as fh:
        return parse_lines(ledger_lines(fh.read()), source=str(path))


def ledger_lines(text: str) -> list[str]:
    """The lines of a ledger, each with its ``\n`` (a torn last one without): split at
    ``\n`` only. A row's JSON may hold U+2028, U+2029 or U+0085 unescaped (an agent's text
    in an error): ``str.splitlines`` would break the row there."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


@dataclass
class Tally:
    """Counts by status and outcome, and the mean score, over a selection. A selection over
    several benchmarks has one mean per benchmark and no mean across them (a partial score
    of one and a pass/fail of another do not average): ``mean_score`` is then None."""

    counts: dict[str, int]
    outcome_counts: dict[str, int]
    mean_score: float | None
    by_benchmark: dict[str, float] = field(default_factory=dict)  # benchmark -> mean
    verdict: VerdictScore | None = None  # the same over the units with a verdict


def tally(selection: list[str], latest: dict[str, TaskRow]) -> Tally:
    """The run's figures over its selection (the denominator): a selected instance without a
    row scores 0, and each row's score follows the report's rule (one rule everywhere);
    beside them, the figures over the units with a verdict and why the others have none."""
    from harness.core.models import VerdictScore
    from harness.core.scoring import no_verdict_reason, row_score  # shared with the report

    rows = [latest[k] for k in selection if k in latest]
    counts = Counter(r.status for r in rows)
    outcomes = Counter(r.outcome.value for r in rows)
    groups: dict[str, list[float]] = {}
    judged: dict[str, list[float]] = {}
    excluded: Counter[str] = Counter()
    for k in selection:
        row = latest.get(k)
        score = row_score(row) if row is not None else 0.0
        groups.setdefault(k.split("/", 1)[0], []).append(score)
        reason = no_verdict_reason(row)
        if reason is None:
            judged.setdefault(k.split("/", 1)[0], []).append(score)
        else:
            excluded[reason] += 1
    by_benchmark = {name: sum(v) / len(v) for name, v in sorted(groups.items())}
    mean = next(iter(by_benchmark.values())) if len(by_benchmark) == 1 else None
    judged_means = {name: sum(v) / len(v) for name, v in sorted(judged.items())}
    verdict = VerdictScore(
        mean_score=(next(iter(judged_means.values())) if len(groups) == 1 and judged_means
                    else None),
        units=sum(len(v) for v in judged.values()), excluded=sum(excluded.values()),
        excluded_reasons=dict(sorted(excluded.items())),
        by_benchmark=judged_means if len(groups) > 1 else None)
    return Tally(dict(sorted(counts.items())), dict(sorted(outcomes.items())), mean,
                 by_benchmark, verdict)


def apply_tally(manifest: Manifest, figures: Tally) -> None:
    """The manifest's figures from ``figures`` (the run, a rescore, a merge: one place). A
    dry run has no score: not a mean of zeros."""
    manifest.counts = figures.counts
    manifest.outcome_counts = figures.outcome_counts
    dry = manifest.dry_run
    manifest.mean_score = None if dry else figures.mean_score
    manifest.verdict_score = None if dry else figures.verdict
    manifest.extra.mean_score_by_benchmark = None if dry else figures.by_benchmark or None


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
        # appending to a ledger a crash left torn (a rescore of a killed run): the torn line
        # goes aside first, never into the middle of the file
        self.torn_set_aside = set_aside_torn_tail(self.path)
        self.pending: dict[Path, list[str]] = {}  # lines not written yet, per file, in order
        self.failures = 0
        self.copies: FolderCopies | None = None  # new folders being written behind the run

    @property
    def unwritten(self) -> int:
        """Lines of the run-root ledger still held in memory."""
        return len(self.pending.get(self.path, []))

    def append(self, row: TaskRow) -> bool:
        """Write ``row`` at the run root (fsynced) and in its instance folder; False when
        some write failed (reported, kept and retried: see the module doc)."""
        return self.append_batch([row])

    def append_batch(self, rows: list[TaskRow], *, new_folders: bool = False) -> bool:
        """Write ``rows`` at the run root in one append and one fsync, then each in its
        instance folder. ``new_folders``: the rows a resume carries, whose folders do not
        exist yet, are written there by a helper process while the run goes on (see
        :meth:`settle`). A kill in the middle leaves a prefix of the rows and at most a torn
        last line, which the reader skips; an instance folder's copy is never read back by
        the runner."""
        lines: list[tuple[str, str, str]] = []  # benchmark, instance id, line
        for row in rows:
            line = row.dump_line()
            if "\n" in line:
                raise ValueError("a ledger line must not contain a newline")
            lines.append((row.benchmark, row.instance_id, line))
        if not lines:
            return True
        self.pending.setdefault(self.path, []).extend(line for _, _, line in lines)
        ok = self._flush(self.path)
        if new_folders:
            self.settle()  # one batch behind the run at a time
            self.copies = FolderCopies(os.fspath(self.run_root), LEDGER_NAME, lines)
            return ok
        if self.copies is not None and any(self.copies.holds(b, i) for b, i, _ in lines):
            self.settle()  # a row after a carried one: in order in its folder too
        for benchmark, iid, line in lines:
            copy = instance_dir(self.run_root, benchmark, iid) / LEDGER_NAME
            self.pending.setdefault(copy, []).append(line)
            ok = self._flush(copy) and ok
        return ok

    def settle(self) -> bool:
        """Wait for the copies being written behind the run; False when some could not be
        written (reported, kept in memory and retried by :meth:`flush_pending`)."""
        copies, self.copies = self.copies, None
        if copies is None:
            return True
        failed = copies.wait()
        for i, _ in failed:
            entry = copies.entries[i]
            self.pending.setdefault(Path(copies.path(entry)), []).append(entry[2])
        if failed:
            self.failures += 1
            sys.stderr.write(f"harness: {DIAGNOSTIC_WRITE_FAILED}: {os.fspath(self.run_root)}: "
                             f"{len(failed)} instance folder(s) ({len(failed)} row(s) kept in "
                             f"memory): {failed[0][1]}\n")
            sys.stderr.flush()
        return not failed

    def flush_pending(self) -> int:
        """Retry every held line; returns how many run-root lines are still unwritten."""
        self.settle()
        for path in list(self.pending):
            self._flush(path)
        return self.unwritten

    def _flush(self, path: Path) -> bool:
        lines = self.pending.get(path, [])
        if not lines:
            self.pending.pop(path, None)
            return True
        try:
            if path == self.path:
                _append_synced(path, lines)
            else:
                while lines:
                    _append_copy(path, lines[0])
                    lines.pop(0)
        except OSError as exc:
            self.failures += 1
            report_write_failure(f"{path} ({len(lines)} row(s) kept in memory)", exc)
            return False
        self.pending.pop(path, None)
        return True


def _append_synced(path: Path, lines: list[str]) -> None:
    """Append ``lines`` to the run root's ledger in one write and fsync them (and the
    folder, when the file is new). The lines written whole leave ``lines`` even when a
    later part of the write fails."""
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    new = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    written = 0
    try:
        view = memoryview(data)
        while written < len(data):
            written += os.write(fd, view[written:])
        os.fsync(fd)
    finally:
        os.close(fd)
        del lines[:data.count(b"\n", 0, written)]  # what was not written whole is kept
    if new:
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def _append_copy(path: Path | str, line: str) -> None:
    """Append a line to an instance folder's copy of the ledger: written, not fsynced."""
    try:
        append_line(path, line)
    except FileNotFoundError:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        append_line(path, line)


def refresh_figures(run_root: Path, why: str) -> None:
    """Bring a finished run's manifest figures (counts, outcomes, mean score) back in line
    with its ledger after a tool appended rows to it (``harness programbench rescore``):
    the manifest, the ledger and a report written from them then agree. ``why`` is recorded
    (``extra.figures_refreshed``, with the time)."""
    import time

    from harness.run.manifest import read_manifest, write_manifest

    manifest = read_manifest(run_root)
    apply_tally(manifest, tally(manifest.selection.instance_ids,
                                read_ledger(ledger_path(run_root)).latest))
    done = list(manifest.extra.figures_refreshed or [])
    manifest.extra.figures_refreshed = [*done, {"why": why, "at_unix": round(time.time(), 3)}]
    write_manifest(manifest, run_root)
