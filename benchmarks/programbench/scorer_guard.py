"""Remove what would steer the official scorer from a ``submission.tar.gz``.

``programbench eval`` unpacks the submission into ``/workspace`` and later runs each test
branch there as ``cd /workspace && python3 -m pytest --rootdir=eval eval/tests/ ...``. What
that pytest consults, and so what a submission could use to change its verdict:

* ini files: pytest looks for ``pytest.ini``/``.pytest.ini``/``pytest.toml``/
  ``.pytest.toml``/``tox.ini`` ``[pytest]``/``setup.cfg`` ``[tool:pytest]``/
  ``pyproject.toml`` ``[tool.pytest...]`` in ``eval/tests``, ``eval``, ``/workspace`` and
  above; the first one found is the configuration (``addopts``, plugins, ``confcutdir``). An
  unparsable ``setup.cfg``/``pyproject.toml``, or a ``[pytest]`` section in ``setup.cfg``,
  aborts pytest (every test unrun).
* ``conftest.py``: pytest imports the ones in the directories of its arguments and their
  parents (``/workspace/eval/tests``, ``/workspace/eval``, ``/workspace``; pytest 7 has no
  ``confcutdir`` without an ini file). A ``conftest.py`` deeper in the submission
  (``src/conftest.py``, ``tests/conftest.py``) is never on that path, so it is kept.
* ``eval/``: the evaluator's reserved folder; the branch's tests are unpacked over it, so any
  extra file there (a ``conftest.py``, an ini file, a test module) joins the run.
* ``python3 -m`` puts the working directory first on ``sys.path``: a root module named like a
  standard-library or pytest module (``subprocess.py``, ``pytest.py``, ``_pytest/__init__.py``)
  replaces the real one inside the scorer. Only the module file (or the package's
  ``__init__``) goes: a folder without it is a namespace portion, which never shadows.

Rules: at the root, those ini files, ``conftest.py`` and ``eval/`` are removed (with all
below them); ``setup.cfg`` and ``pyproject.toml`` lose only their pytest sections (a Python
submission may need them to build), and are removed when they are not regular files, too
large, unparsable, or still configure pytest after the cut. Entries with an absolute or
``..`` path, entries below an archive symlink, and hard links to a removed entry are dropped
too (the container's tar would write through them, or fail on them).

Streaming: one pass, tar in -> tar out, no member held in memory except the two small config
files. Idempotent: a guarded archive passes through unchanged (apart from re-compression).
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import io
import os
import posixpath
import tarfile
import tempfile
from pathlib import Path
from typing import IO

from pydantic import BaseModel, ConfigDict, Field

from benchmarks.programbench.scorer_rules import (
    EDITED_CONFIGS,
    MAX_CONFIG_BYTES,
    Reason,
    edit_config,
    root_reason,
)
from harness.api import SubmissionDetails, hash_untrusted_file

REPORT_NAME = "scorer_guard.json"


class RemovedEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    reason: Reason


class ScorerGuardReport(BaseModel):
    """``scorer_guard.json`` beside the submission: what the scorer will not see."""

    model_config = ConfigDict(extra="forbid")

    removed: list[RemovedEntry] = Field(default_factory=list)
    rewritten: list[str] = Field(default_factory=list)  # pytest sections cut out
    entries_in: int = 0
    entries_out: int = 0
    sha256_in: str = ""
    sha256_out: str = ""

    @property
    def removed_names(self) -> list[str]:
        return [r.name for r in self.removed]


class GuardError(Exception):
    """The archive cannot be read (a corrupt or truncated tar.gz)."""


def _normalise(name: str) -> str | None:
    """The member's path as the container's tar writes it; None when it escapes the root."""
    if name.startswith("/") or not name:
        return None
    norm = posixpath.normpath(name)
    if norm == ".":
        return ""
    if norm.startswith("../") or norm == ".." or "/../" in f"/{name}/":
        return None
    return norm


class _Hashing(io.RawIOBase):
    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.digest = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buf: memoryview) -> int:  # type: ignore[override]
        data = self.raw.read(len(buf))
        self.digest.update(data)
        buf[: len(data)] = data
        return len(data)


def guard_stream(src: IO[bytes], dst: IO[bytes]) -> ScorerGuardReport:
    """Copy the tar.gz ``src`` to ``dst`` without what would steer the scorer."""
    report = ScorerGuardReport()
    hashed_in = _Hashing(src)
    symlinks: set[str] = set()
    removed: set[str] = set()
    with gzip.GzipFile(fileobj=dst, mode="wb", filename="", mtime=0) as gz, tarfile.open(
        fileobj=gz, mode="w|", format=tarfile.GNU_FORMAT
    ) as out:
        try:
            with tarfile.open(fileobj=io.BufferedReader(hashed_in), mode="r|gz") as tar:
                for member in tar:
                    report.entries_in += 1
                    _copy_member(tar, out, member, report, symlinks, removed)
        except (tarfile.TarError, OSError, EOFError, gzip.BadGzipFile) as exc:
            raise GuardError(f"the submission archive cannot be read: {exc}") from exc
    report.sha256_in = hashed_in.digest.hexdigest()
    return report


def _copy_member(
    tar: tarfile.TarFile,
    out: tarfile.TarFile,
    member: tarfile.TarInfo,
    report: ScorerGuardReport,
    symlinks: set[str],
    removed: set[str],
) -> None:
    def drop(reason: Reason) -> None:
        report.removed.append(RemovedEntry(name=member.name, reason=reason))
        if norm:
            removed.add(norm)

    norm = _normalise(member.name)
    if norm is None:
        return drop("unsafe_path")
    if norm == "":
        out.addfile(member)  # the root itself
        report.entries_out += 1
        return
    parts = norm.split("/")
    if any("/".join(parts[:i]) in symlinks for i in range(1, len(parts))):
        return drop("below_symlink")
    reason = root_reason(parts)
    if reason is not None:
        return drop(reason)
    if member.islnk():
        target = _normalise(member.linkname)
        if not target:
            return drop("unsafe_path")
        if target in removed:
            return drop("link_to_removed")
        tparts = target.split("/")
        if any("/".join(tparts[:i]) in symlinks for i in range(1, len(tparts) + 1)):
            return drop("below_symlink")
    if len(parts) == 1 and norm in EDITED_CONFIGS:
        if not member.isreg() or member.size > MAX_CONFIG_BYTES:
            return drop("pytest_config_unstrippable")
        fh = tar.extractfile(member)
        data = fh.read() if fh is not None else b""
        edited = edit_config(norm, data)
        if edited is None:
            return drop("pytest_config_unstrippable")
        if edited != data:
            report.rewritten.append(member.name)
            member = copy.copy(member)
            member.size = len(edited)
        out.addfile(member, io.BytesIO(edited))
        report.entries_out += 1
        return
    if member.issym():
        symlinks.add(norm)
    if member.isreg():
        if member.sparse is not None:
            member = copy.copy(member)
            member.type, member.sparse = tarfile.REGTYPE, None
        out.addfile(member, tar.extractfile(member))
    else:
        out.addfile(member)
    report.entries_out += 1


def guard_submission(path: Path) -> ScorerGuardReport:
    """Filter ``path`` in place and write ``scorer_guard.json`` beside it.

    Idempotent: when the report beside it already names the current file, nothing runs.
    Raises :class:`GuardError` when the archive cannot be read.
    """
    path = Path(path)
    report_path = path.parent / REPORT_NAME
    known = read_report(path.parent)
    if known is not None and path.is_file() and known.sha256_out == hash_untrusted_file(path)[0]:
        return known
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with open(path, "rb") as src, os.fdopen(fd, "wb") as dst:
            report = guard_stream(src, dst)
        report.sha256_out = hash_untrusted_file(Path(tmp))[0]
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    from harness.api import atomic_write_text

    atomic_write_text(report_path, report.model_dump_json(indent=2) + "\n")
    return report


def read_report(folder: Path) -> ScorerGuardReport | None:
    try:
        return ScorerGuardReport.model_validate_json((Path(folder) / REPORT_NAME).read_text())
    except (OSError, ValueError):
        return None


def row_details(path: Path) -> SubmissionDetails:
    """Guard ``path`` and say so for the row (``details.submission.scorer_files_removed``...)."""
    try:
        report = guard_submission(path)
    except (GuardError, OSError) as exc:
        return SubmissionDetails(scorer_guard_error=str(exc)[:1000])
    return SubmissionDetails(scorer_files_removed=report.removed_names,
                             scorer_files_rewritten=list(report.rewritten))
