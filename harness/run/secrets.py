"""Find and redact the agent's secrets in files the run keeps (streaming, bounded memory).

Each secret handed to the agent (``--agent-env NAME``: the value comes from this
environment) is looked for in these forms:

* ``raw``: the value's UTF-8 bytes;
* ``base64`` and ``base64url``: the characters that depend on the value alone, for each of
  the three alignments the value can have in a longer encoded stream, with an optional line
  break (``\\n`` or ``\\r\\n``) between any two characters (``base64`` wraps at 76 columns);
* ``hex`` and ``hex_upper``: lower- and upper-case hexadecimal.

A match is replaced by :data:`MARKER` and the file rewritten atomically (a temporary file
beside it, then a rename; mode kept). A ``.tar.gz``/``.tgz`` archive (the ProgramBench
submission) is scanned member by member (names, link targets and contents) and, on a hit,
rewritten with the redacted members. A file or folder *name* holding a secret is renamed.
Files are read in chunks of :data:`CHUNK` bytes, keeping the last ``longest match - 1``
bytes for the next chunk, so memory stays bounded whatever the file size; symlinks, FIFOs
and devices are skipped and never followed. Values shorter than :data:`MIN_SECRET_BYTES`
are not scanned (reported by name in ``skipped``): their encoded forms would match at random.

What this does not catch: a value transformed otherwise (compressed other than as a
``.tar.gz``, encrypted, reversed, split): it finds accidental leaks, it is no barrier
against an agent that means to hide a secret. Records hold names, forms, files and counts,
never a value.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import stat
import tarfile
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from harness.core.fsutil import atomic_open
from harness.run.ledger import ledger_path, read_ledger

MARKER = b"[harness:redacted-secret]"
NAME_MARKER = "REDACTED-SECRET"
MIN_SECRET_BYTES = 8
CHUNK = 1 << 20
SPOOL_BYTES = 8 << 20  # a redacted archive member above this goes to a temporary file
MAX_ARCHIVE_BYTES = 2 << 30  # a bigger .tar.gz (unpacked) is scanned as plain bytes only
TAR_SUFFIXES = (".tar.gz", ".tgz")
_NEWLINE = rb"(?:\r?\n)?"


@dataclass(frozen=True)
class Form:
    secret: str  # the environment variable's name
    form: str  # raw | base64 | base64url | hex | hex_upper
    regex: bytes  # a regular expression source
    max_len: int  # the longest text it can match


def _b64_forms(value: bytes, encode: Callable[[bytes], bytes]) -> list[bytes]:
    """The value-only characters of its encoding at alignments 0, 1 and 2."""
    out = []
    for pad in range(3):
        enc = encode(b"\0" * pad + value)
        start = -(-8 * pad // 6)  # first character made only of the value's bits
        end = (8 * pad + 8 * len(value)) // 6  # past the last one
        out.append(enc[start:end])
    return out


def secret_forms(name: str, value: str) -> list[Form]:
    """Every form of one secret (duplicates dropped: a hex of digits has one case)."""
    raw = value.encode("utf-8", "surrogateescape")
    forms: list[Form] = []
    seen: set[bytes] = set()

    def add(form: str, text: bytes, wrapped: bool) -> None:
        if not text or text in seen:
            return
        seen.add(text)
        if wrapped:
            regex = _NEWLINE.join(re.escape(text[i:i + 1]) for i in range(len(text)))
            forms.append(Form(name, form, regex, 3 * len(text)))
        else:
            forms.append(Form(name, form, re.escape(text), len(text)))

    add("raw", raw, False)
    for text in _b64_forms(raw, base64.b64encode):
        add("base64", text, True)
    for text in _b64_forms(raw, base64.urlsafe_b64encode):
        add("base64url", text, True)
    add("hex", raw.hex().encode(), False)
    add("hex_upper", raw.hex().upper().encode(), False)
    return forms


@dataclass
class Hit:
    file: str  # relative to the scanned root; an archive member as ``archive:member``
    secret: str
    form: str
    count: int

    def record(self) -> dict[str, Any]:
        return {"file": self.file, "secret": self.secret, "form": self.form,
                "count": self.count}


@dataclass
class ScanReport:
    secrets: list[str] = field(default_factory=list)  # names scanned for
    skipped: list[str] = field(default_factory=list)  # names not scanned (too short)
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    hits: list[Hit] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        return {"secrets": self.secrets, "skipped": self.skipped, "files": self.files,
                "bytes": self.bytes, "seconds": round(self.seconds, 3),
                "hits": [h.record() for h in self.hits], "errors": self.errors[:50]}


Counts = Counter[tuple[str, str]]  # (secret name, form) -> matches


class SecretScanner:
    """Compiled forms of a set of secrets; scans streams, files and folders."""

    def __init__(self, secrets: Mapping[str, str]) -> None:
        self.names = sorted(n for n, v in secrets.items()
                            if len(v.encode("utf-8", "surrogateescape")) >= MIN_SECRET_BYTES)
        self.skipped = sorted(set(secrets) - set(self.names))
        self.forms = [f for n in self.names for f in secret_forms(n, secrets[n])]
        # One expression per form: each starts with a literal, which the regex engine
        # finds ~100 times faster than it tries an alternation at every position.
        self.compiled = [(re.compile(f.regex), f) for f in self.forms]
        self.keep = max((f.max_len for f in self.forms), default=1) - 1

    def __bool__(self) -> bool:
        return bool(self.compiled)

    def _matches(self, data: bytes) -> Iterator[tuple[int, int, Form]]:
        """Non-overlapping matches of all forms, leftmost first (the longest at a tie)."""
        found = sorted((m.start(), m.start() - m.end(), i, m.end())
                       for i, (rx, _) in enumerate(self.compiled) for m in rx.finditer(data))
        pos = 0
        for start, _, i, end in found:
            if start >= pos:
                yield start, end, self.compiled[i][1]
                pos = end

    def scan_bytes(self, data: bytes) -> tuple[bytes, Counts]:
        """``data`` with every match replaced, and the counts (for short texts: names)."""
        counts: Counts = Counter()
        if not self:
            return data, counts
        out, pos = bytearray(), 0
        for start, end, form in self._matches(data):
            counts[form.secret, form.form] += 1
            out += data[pos:start] + MARKER
            pos = end
        return bytes(out + data[pos:]), counts

    def scan_stream(self, read: Callable[[int], bytes],
                    write: Callable[[bytes], Any] | None = None) -> tuple[Counts, int]:
        """Read to the end; ``write`` (if given) gets the redacted bytes. Returns counts, size.

        A match is taken once it starts at least ``longest - 1`` bytes before the end of
        what has been read (it then lies wholly inside); the rest waits for the next chunk.
        """
        counts: Counts = Counter()
        buf, size = b"", 0
        while True:
            chunk = read(CHUNK)
            size += len(chunk)
            eof = not chunk
            buf += chunk
            limit = len(buf) if eof else len(buf) - self.keep
            pos = 0
            if self and limit > 0:
                for start, end, form in self._matches(buf):
                    if start >= limit:
                        break
                    counts[form.secret, form.form] += 1
                    if write is not None:
                        write(buf[pos:start])
                        write(MARKER)
                    pos = end
            cut = len(buf) if eof else max(limit, pos)
            if write is not None and cut > pos:
                write(buf[pos:cut])
            buf = buf[cut:]
            if eof:
                return counts, size

    # -- files -----------------------------------------------------------------------
    def scan_file(self, path: Path, rel: str, report: ScanReport, *,
                  redact: bool = True) -> None:
        """Scan one regular file (not followed if a link); redact it in place on a hit."""
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path, flags)
        except OSError as exc:
            report.errors.append(f"{rel}: {exc.strerror or exc}")
            return
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                return
            report.files += 1
            if path.name.endswith(TAR_SUFFIXES) and fh.read(2) == b"\x1f\x8b":
                fh.seek(0)
                if self._scan_tar(fh, path, rel, st.st_mode, report, redact=redact):
                    return
            fh.seek(0)
            counts, size = self.scan_stream(fh.read)
            report.bytes += size
            if not counts:
                return
            _add_hits(report, rel, counts)
            if redact:
                fh.seek(0)
                self._rewrite(path, st.st_mode, lambda out: self.scan_stream(fh.read, out.write))

    def _rewrite(self, path: Path, mode: int, body: Callable[[IO[bytes]], Any]) -> None:
        with atomic_open(path, mode & 0o777) as out:
            body(out)

    def _scan_tar(self, fh: IO[bytes], path: Path, rel: str, mode: int, report: ScanReport,
                  *, redact: bool) -> bool:
        """Scan an archive's members; rewrite it on a hit. False if it is no valid archive
        (or holds more than :data:`MAX_ARCHIVE_BYTES`): the caller scans its bytes."""
        found: dict[int, tuple[str, Counts]] = {}  # by position in the archive
        total = 0
        try:
            with tarfile.open(fileobj=fh, mode="r|gz") as tar:
                for index, member in enumerate(tar):
                    total += member.size if member.isreg() else 0
                    if total > MAX_ARCHIVE_BYTES:
                        raise tarfile.TarError(f"over {MAX_ARCHIVE_BYTES} bytes unpacked")
                    counts = self._member_counts(member, tar)
                    if counts:
                        found[index] = (member.name, counts)
        except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
            report.errors.append(f"{rel}: not opened as a tar.gz ({exc}); scanned as bytes")
            return False
        report.bytes += total
        for name, counts in found.values():
            _add_hits(report, f"{rel}:{self.redact_text(name)}", counts)
        if found and redact:
            fh.seek(0)
            self._rewrite(path, mode, lambda out: self._redact_tar(fh, out, set(found)))
        return True

    def _member_counts(self, member: tarfile.TarInfo, tar: tarfile.TarFile) -> Counts:
        counts: Counts = Counter()
        pax = [v for k, v in member.pax_headers.items() if k not in ("path", "linkpath")]
        for text in (member.name, member.linkname, member.uname, member.gname, *pax):
            counts.update(self.scan_bytes(text.encode("utf-8", "surrogateescape"))[1])
        if member.isreg():
            src = tar.extractfile(member)
            if src is not None:
                counts.update(self.scan_stream(src.read)[0])
        return counts

    def redact_text(self, text: str) -> str:
        data = self.scan_bytes(text.encode("utf-8", "surrogateescape"))[0]
        return data.decode("utf-8", "surrogateescape")

    def _redact_tar(self, src: IO[bytes], out: IO[bytes], hit: set[int]) -> None:
        """Copy the archive; the members at positions ``hit`` are redacted on the way."""
        with tarfile.open(fileobj=src, mode="r|gz") as tin, \
                tarfile.open(fileobj=out, mode="w|gz", format=tarfile.PAX_FORMAT) as tout:
            for index, member in enumerate(tin):
                if index not in hit:
                    tout.addfile(member, tin.extractfile(member) if member.isreg() else None)
                    continue
                info = member.replace(
                    name=self.redact_text(member.name),
                    linkname=self.redact_text(member.linkname),
                    uname=self.redact_text(member.uname), gname=self.redact_text(member.gname),
                    deep=False)
                # "path"/"linkpath" would win over the redacted names: they are made again
                info.pax_headers = {k: self.redact_text(v) for k, v in member.pax_headers.items()
                                    if k not in ("path", "linkpath")}
                data = tin.extractfile(member) if member.isreg() else None
                if data is None:
                    tout.addfile(info)
                    continue
                with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
                    self.scan_stream(data.read, spool.write)
                    info.size = spool.tell()
                    spool.seek(0)
                    tout.addfile(info, spool)

    def scan_tree(self, root: Path, *, redact: bool = True,
                  rel_to: Path | None = None) -> ScanReport:
        """Scan every regular file under ``root`` (links never followed); redact hits."""
        report = ScanReport(secrets=list(self.names), skipped=list(self.skipped))
        if not self:
            return report
        started = time.monotonic()
        base = rel_to or root
        self._walk(Path(root), Path(base), report, redact)
        report.seconds = time.monotonic() - started
        return report

    def _walk(self, root: Path, base: Path, report: ScanReport, redact: bool) -> None:
        """Depth first without recursion (an agent's tree may be thousands of folders deep):
        a folder's name is checked, and maybe renamed, after its contents."""
        stack = [(root, self._entries(root, base, report))]
        while stack:
            folder, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                stack.pop()
                if stack:  # the root's own name is the caller's
                    self._check_name(folder, base, report, redact)
                continue
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                stack.append((path, self._entries(path, base, report)))
                continue
            if entry.is_file(follow_symlinks=False):
                self.scan_file(path, _rel(path, base), report, redact=redact)
            self._check_name(path, base, report, redact)

    @staticmethod
    def _entries(folder: Path, base: Path, report: ScanReport) -> Iterator[os.DirEntry[str]]:
        try:
            return iter(sorted(os.scandir(folder), key=lambda e: e.name))
        except OSError as exc:
            report.errors.append(f"{_rel(folder, base)}: {exc.strerror or exc}")
            return iter(())

    def _check_name(self, path: Path, base: Path, report: ScanReport, redact: bool) -> None:
        data, counts = self.scan_bytes(path.name.encode("utf-8", "surrogateescape"))
        if not counts:
            return
        new = data.decode("utf-8", "surrogateescape").replace(MARKER.decode(), NAME_MARKER)
        target = path.with_name(new)
        n = 0
        while os.path.lexists(target):
            n += 1
            target = path.with_name(f"{new}.{n}")
        _add_hits(report, f"{_rel(path.parent, base)}/{new} (name)", counts)
        if redact:
            try:
                os.rename(path, target)  # renames a link itself, never its target
            except OSError as exc:
                report.errors.append(f"{_rel(target, base)}: rename failed: {exc.strerror}")


def _rel(path: Path, base: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.relative_to(base))
    return str(path)


def _add_hits(report: ScanReport, file: str, counts: Counts) -> None:
    for (secret, form), count in sorted(counts.items()):
        report.hits.append(Hit(file, secret, form, count))


def secrets_from_env(names: Sequence[str],
                     environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The values of ``names`` in this environment (absent names are left out)."""
    env = os.environ if environ is None else environ
    return {n: env[n] for n in dict.fromkeys(names) if n in env}


def scan_and_redact(root: Path, secrets: Mapping[str, str], *,
                    rel_to: Path | None = None) -> ScanReport:
    """Scan ``root`` for ``secrets`` and redact every hit in place (the one entry point)."""
    return SecretScanner(secrets).scan_tree(Path(root), rel_to=rel_to)


def redact_json(value: Any, scanner: SecretScanner) -> Any:
    """A JSON-like value with every string redacted (a row before it is recorded)."""
    if isinstance(value, str):
        return scanner.redact_text(value)
    if isinstance(value, list):
        return [redact_json(v, scanner) for v in value]
    if isinstance(value, dict):
        return {k: redact_json(v, scanner) for k, v in value.items()}
    return value


def redact_row(row: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """A row (as JSON data) with the values of ``names`` redacted from every string."""
    redacted: dict[str, Any] = redact_json(row, SecretScanner(secrets_from_env(names)))
    return redacted


def instance_scan(folder: Path, run_root: Path, names: Sequence[str]) -> dict[str, Any]:
    """The row's run section after an instance (``details.run``: ``secret_hits``, any scan
    errors); {} if no names."""
    if not names:
        return {}
    try:
        report = scan_and_redact(folder, secrets_from_env(names), rel_to=run_root)
    except Exception as exc:  # a scan problem is recorded, never a lost row
        return {"secret_hits": [], "secret_scan_error": f"{type(exc).__name__}: {exc}"[:500]}
    out: dict[str, Any] = {"secret_hits": [h.record() for h in report.hits]}
    if report.errors:
        out["secret_scan_errors"] = report.errors[:20]
    return out


def run_scan(run_root: Path, names: Sequence[str]) -> dict[str, Any]:
    """The manifest's ``secret_scan``: the run-end scan of the whole run root, plus the
    instances whose rows recorded hits (from the ledger)."""
    try:
        record = scan_and_redact(run_root, secrets_from_env(names)).record()
    except Exception as exc:
        record = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    try:
        latest = read_ledger(ledger_path(run_root)).latest
        record["instances_with_hits"] = sorted(
            key for key, row in latest.items() if row.details.run.secret_hits)
    except Exception as exc:
        record["ledger_error"] = f"{type(exc).__name__}: {exc}"[:500]
    return record
