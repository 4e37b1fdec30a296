"""Tar streams out of a container (``get_archive``); what goes in is :mod:`.pack`.

* Out: the daemon's archive of a container path, read as a stream (never whole in memory)
  into :class:`Member` records (:func:`open_members`), then either extracted into a host
  directory (:func:`extract_to`) or re-packed as a ``.tar.gz`` (:func:`export_tar_gz`).

What comes out was written by the agent (DESIGN.md section 8), so copy-out is bounded and
inert:

* :class:`CopyLimits`: kept bytes (regular files' sizes, so a sparse file counts in full)
  and kept entries per copy. The stream itself, excluded caches included, may carry at most
  ``SCAN_FACTOR`` times both. A member is refused from its header, before its data is read:
  ``truncate -s 3G`` costs one header. Going over raises :class:`CopyTooLarge`
  (``submission_too_large``) or :class:`TooManyFiles` (``too_many_files``): agent failures
  (:class:`CopyRefused`), never infrastructure.
* Names that are absolute, climb with ``..`` or lie outside the copied directory, FIFOs and
  devices are skipped (kind ``special``); setuid/setgid/sticky bits are dropped.
* Symlinks are entries, never resolved or followed on the host; host writes go through
  directory descriptors opened with ``O_NOFOLLOW``, component by component.
* Protected artifacts never come out: by path (``protected``) and by content
  (``protected_hashes``, sha256 hex -> size): a regular member whose size equals a
  protected size is spooled and hashed; equal bytes are dropped whatever the name.
* The daemon reads as root, so modes the agent set (``chmod 000``) do not stop a copy.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import os
import posixpath
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import docker
from docker.errors import APIError, NotFound
from requests.exceptions import RequestException
from urllib3.exceptions import HTTPError as Urllib3Error

from harness.core.fsutil import atomic_open
from harness.sandbox.errors import CopyFailed
from harness.sandbox.limits import DEFAULT_MAX_COPY_FILES as DEFAULT_MAX_COPY_FILES
from harness.sandbox.limits import DEFAULT_MAX_COPY_MB as DEFAULT_MAX_COPY_MB
from harness.sandbox.limits import SCAN_FACTOR, CopyLimits

Exclude = Callable[[str], bool]
_SPOOL = 32 << 20
_READ = 1 << 20

# What a daemon stream that breaks midway raises while it is read.
_STREAM_ERRORS = (tarfile.TarError, OSError, EOFError, RequestException, Urllib3Error, ValueError)

DIR, FILE, SYMLINK, HARDLINK = "dir", "file", "symlink", "hardlink"
SPECIAL, PROTECTED, PROTECTED_CONTENT = "special", "protected", "protected_content"


class CopyRefused(Exception):
    """Agent content a copy-out refuses: an agent failure with a reason code, not infra."""

    reason_code = "workspace_unexportable"

    def __init__(self, message: str, reason_code: str | None = None) -> None:
        super().__init__(message)
        if reason_code is not None:
            self.reason_code = reason_code


class CopyTooLarge(CopyRefused):
    reason_code = "submission_too_large"


class TooManyFiles(CopyRefused):
    reason_code = "too_many_files"


class ArchiveBroken(CopyFailed):
    """The daemon's archive stream broke after it started (infra unless shown otherwise)."""

    reason_code = "copy_stream_broken"


class Budget:
    """Counts one copy-out against its :class:`CopyLimits`."""

    def __init__(self, limits: CopyLimits, what: str) -> None:
        self.limits = limits
        self.what = what
        self.bytes = self.files = 0
        self.seen_bytes = self.seen_files = 0

    def seen(self, size: int, name: str) -> None:
        """One streamed entry (kept or not), counted from its header."""
        self.seen_files += 1
        self.seen_bytes += size
        lim = self.limits
        if self.seen_files > SCAN_FACTOR * lim.max_files:
            raise TooManyFiles(f"{self.what} holds more than {SCAN_FACTOR * lim.max_files} "
                               f"entries, excluded caches included; at {name!r}")
        if self.seen_bytes > SCAN_FACTOR * lim.max_bytes:
            raise CopyTooLarge(f"{self.what} holds more than {SCAN_FACTOR * lim.max_bytes} "
                               f"bytes, excluded caches included: {name!r} is {size} bytes")

    def keep(self, size: int, name: str) -> None:
        """One kept entry; ``size`` is a regular file's size (sparse files count in full)."""
        self.files += 1
        self.bytes += size
        lim = self.limits
        if self.files > lim.max_files:
            raise TooManyFiles(f"{self.what} has more than {lim.max_files} files "
                               f"(--max-copy-out-files); at {name!r}")
        if self.bytes > lim.max_bytes:
            raise CopyTooLarge(f"{self.what} is over {lim.max_bytes >> 20} MB "
                               f"(--max-copy-out-mb): {name!r} is {size} bytes")


@dataclass
class Member:
    """One entry of a container archive, relative to the copied directory."""

    rel: str  # "/"-separated, no leading "/" or "./", no ".." component
    kind: str  # DIR, FILE, SYMLINK, HARDLINK, SPECIAL (FIFO, device, unsafe name),
    # PROTECTED (a protected path) or PROTECTED_CONTENT (a protected artifact's bytes)
    size: int = 0  # regular files only
    mode: int = 0o644  # permission bits only: setuid/setgid/sticky already dropped
    linkname: str = ""  # SYMLINK: the target, verbatim (never resolved); HARDLINK: a rel
    data: IO[bytes] | None = None  # FILE: readable until the next member


class _MemberData(io.RawIOBase):
    """A member's data whose stream errors (the daemon's archive broke) are CopyFailed."""

    def __init__(self, inner: IO[bytes], what: str) -> None:
        self.inner = inner
        self.what = what

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        try:
            return self.inner.read(-1 if size is None else size)
        except _STREAM_ERRORS as exc:
            raise ArchiveBroken(f"the archive broke while reading {self.what}: {exc}") from exc

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self.inner.close()
        super().close()


class ProtectedContent:
    """Drops members whose bytes equal a protected artifact (sha256 hex -> size)."""

    def __init__(self, hashes: Mapping[str, int], spool_dir: Path | None = None) -> None:
        self.hashes = {h.lower(): int(n) for h, n in hashes.items()}
        self.sizes = {n for n in self.hashes.values() if n > 0}
        self.spool_dir = str(spool_dir) if spool_dir is not None else None

    def data(self, member: Member) -> IO[bytes] | None:
        """The member's data, or None when it is a protected artifact.

        Only members of a protected size are spooled (memory up to 32 MB, then a deleted
        temporary file in ``spool_dir``) and hashed; the others stream through.
        """
        assert member.data is not None
        if member.size not in self.sizes:
            return member.data
        spool = tempfile.SpooledTemporaryFile(max_size=_SPOOL, dir=self.spool_dir)  # noqa: SIM115
        digest = hashlib.sha256()
        while chunk := member.data.read(_READ):
            digest.update(chunk)
            try:
                spool.write(chunk)
            except OSError as exc:  # the host's disk: infrastructure
                spool.close()
                raise CopyFailed(f"spooling {member.rel!r} to hash it failed: {exc}") from exc
        if digest.hexdigest() in self.hashes:
            spool.close()
            return None
        spool.seek(0)
        return spool  # type: ignore[return-value]


def _open_archive(api: docker.APIClient, container_id: str, src: str) -> tuple[Any, str]:
    """The daemon's response (a raw stream; close it) and the archive's top name.

    docker-py's ``get_archive`` hides the response behind a generator that cannot close
    it; closing the response is what stops the daemon when a copy is refused early.
    """
    try:
        res = api._get(  # docker-py's own get_archive, minus the generator
            api._url("/containers/{0}/archive", container_id),
            params={"path": src}, stream=True, headers={"Accept-Encoding": "identity"})
        api._raise_for_status(res)
    except (APIError, NotFound, RequestException) as exc:
        raise CopyFailed(f"copy out of {container_id[:12]}:{src} failed: {exc}") from exc
    name = ""
    encoded = res.headers.get("x-docker-container-path-stat")
    if encoded:
        with contextlib.suppress(ValueError):
            name = str(json.loads(base64.b64decode(encoded)).get("name") or "")
    return res, name or posixpath.basename(src.rstrip("/")) or "."


def _relative(name: str, top: str) -> str | None:
    """A member name relative to the copied directory; None for the root; "" if unsafe."""
    name = name.lstrip("/")
    if name in (top, top + "/"):
        return None
    if not name.startswith(top + "/"):
        return ""
    rel = name[len(top) + 1 :].rstrip("/")
    parts = rel.split("/")
    if not rel or any(p in ("", ".", "..") for p in parts):
        return ""
    return rel


def _member(tar: tarfile.TarFile, info: tarfile.TarInfo, top: str) -> Member | None:
    rel = _relative(info.name, top)
    if rel is None:
        return None
    if rel == "":
        return Member(info.name, SPECIAL)
    mode = info.mode & 0o777
    if info.isdir():
        return Member(rel, DIR, mode=mode)
    if info.isreg():
        data = tar.extractfile(info)
        assert data is not None
        reader = io.BufferedReader(_MemberData(data, repr(rel)), _READ)
        return Member(rel, FILE, size=info.size, mode=mode, data=reader)
    if info.issym():
        return Member(rel, SYMLINK, mode=0o777, linkname=info.linkname)
    if info.islnk():
        target = _relative(info.linkname, top)
        if target:
            return Member(rel, HARDLINK, mode=mode, linkname=target)
    return Member(rel, SPECIAL)


@contextlib.contextmanager
def open_members(
    api: docker.APIClient,
    container_id: str,
    src: str,
    budget: Budget,
    *,
    protected: Collection[str] = (),
    protected_hashes: Mapping[str, int] | None = None,
    spool_dir: Path | None = None,
) -> Iterator[Iterator[Member]]:
    """The members of ``src``'s archive, in the daemon's order, as a stream.

    Every member is counted with ``budget.seen`` (from its header) before it is yielded.
    A protected path (absolute, below ``src``) or a file with a protected artifact's bytes
    comes out as one data-less PROTECTED or PROTECTED_CONTENT member (a protected
    directory's contents not at all). A daemon refusing the archive raises
    :class:`CopyFailed`, a stream that breaks midway :class:`ArchiveBroken`, a budget
    overrun :class:`CopyRefused`. The connection is closed on exit, whatever happened.
    """
    res, top = _open_archive(api, container_id, src)
    hidden = _hidden(protected, src)
    guard = ProtectedContent(protected_hashes or {}, spool_dir)

    def members() -> Iterator[Member]:
        try:
            with tarfile.open(fileobj=res.raw, mode="r|", bufsize=_READ) as tar:
                for info in tar:
                    budget.seen(info.size if info.isreg() else 0, info.name)
                    member = _member(tar, info, top)
                    if member is None:
                        continue
                    if _under(member.rel, hidden):
                        if member.rel in hidden:
                            yield Member(member.rel, PROTECTED)
                        continue
                    if member.kind == FILE:
                        member.data = guard.data(member)
                        if member.data is None:
                            yield Member(member.rel, PROTECTED_CONTENT, size=member.size)
                            continue
                    try:
                        yield member
                    finally:
                        if member.data is not None:
                            member.data.close()
        except _STREAM_ERRORS as exc:
            raise ArchiveBroken(
                f"reading the archive of {container_id[:12]}:{src} failed: {exc}"
            ) from exc

    try:
        yield members()
    finally:
        res.close()


def _under(rel: str, dropped: list[str]) -> bool:
    return any(rel == d or rel.startswith(d + "/") for d in dropped)


def _hidden(protected: Collection[str], src: str) -> list[str]:
    """Protected absolute paths as paths relative to ``src`` (those inside it)."""
    root = posixpath.normpath(src)
    out = []
    for path in protected:
        path = posixpath.normpath(path)
        if path.startswith(root.rstrip("/") + "/"):
            out.append(path[len(root.rstrip("/")) + 1 :])
    return out


class _Tree:
    """Writes members under a host directory; never follows a link on the way."""

    _DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root_fd = os.open(root, self._DIR_FLAGS)

    def close(self) -> None:
        os.close(self.root_fd)

    def parent(self, rel: str) -> tuple[int, str]:
        """An open descriptor of ``rel``'s parent (created, real directories only)."""
        *dirs, name = rel.split("/")
        fd = os.dup(self.root_fd)
        try:
            for part in dirs:
                try:
                    nxt = os.open(part, self._DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    os.mkdir(part, 0o755, dir_fd=fd)
                    nxt = os.open(part, self._DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        return fd, name

    @staticmethod
    def _clear(fd: int, name: str) -> None:
        """Remove an existing non-directory entry ``name`` (a link is removed, not followed)."""
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(name)
        os.unlink(name, dir_fd=fd)

    def write(self, member: Member) -> None:
        fd, name = self.parent(member.rel)
        try:
            if member.kind == DIR:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o700, dir_fd=fd)
                sub = os.open(name, self._DIR_FLAGS, dir_fd=fd)
                try:
                    os.fchmod(sub, member.mode | 0o700)
                finally:
                    os.close(sub)
            elif member.kind == FILE:
                self._clear(fd, name)
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                out = os.open(name, flags, 0o600, dir_fd=fd)
                with os.fdopen(out, "wb") as fh:
                    assert member.data is not None
                    shutil.copyfileobj(member.data, fh, _READ)
                    os.fchmod(fh.fileno(), member.mode | 0o600)
            elif member.kind == SYMLINK:
                self._clear(fd, name)
                os.symlink(member.linkname, name, dir_fd=fd)
            elif member.kind == HARDLINK:
                self._clear(fd, name)
                src_fd, src_name = self.parent(member.linkname)
                try:
                    os.link(src_name, name, src_dir_fd=src_fd, dst_dir_fd=fd,
                            follow_symlinks=False)
                finally:
                    os.close(src_fd)
        finally:
            os.close(fd)


def _kept(members: Iterator[Member], exclude: Exclude | None, budget: Budget) -> Iterator[Member]:
    """The members a copy-out writes, each counted with ``budget.keep``.

    Special and protected members are skipped, so is an excluded member and everything
    below it, and a hard link to a file not kept before it.
    """
    dropped: list[str] = []
    files: set[str] = set()
    for m in members:
        if m.kind in (SPECIAL, PROTECTED, PROTECTED_CONTENT) or _under(m.rel, dropped):
            continue
        if exclude is not None and exclude(m.rel):
            dropped.append(m.rel)
            continue
        if m.kind == HARDLINK and m.linkname not in files:
            continue
        budget.keep(m.size, m.rel)
        if m.kind in (FILE, HARDLINK):
            files.add(m.rel)
        yield m


def extract_to(
    api: docker.APIClient,
    container_id: str,
    src: str,
    dest: Path,
    *,
    exclude: Exclude | None = None,
    protected: Collection[str] = (),
    protected_hashes: Mapping[str, int] | None = None,
    limits: CopyLimits | None = None,
) -> list[str]:
    """Extract the contents of directory ``src`` into ``dest``; returns the paths written.

    Modes are kept (owner read/write added, special bits dropped), files are owned by
    the host user, symlinks are written as symlinks and never followed, hard links only
    to files this copy wrote; FIFOs, devices and unsafe names are skipped.
    """
    budget = Budget(limits or CopyLimits(), f"{container_id[:12]}:{src}")
    written: list[str] = []
    tree = _Tree(dest)
    try:
        with open_members(api, container_id, src, budget, protected=protected,
                          protected_hashes=protected_hashes, spool_dir=dest.parent) as members:
            for m in _kept(members, exclude, budget):
                tree.write(m)
                written.append(m.rel)
    except OSError as exc:
        raise CopyFailed(f"extracting {container_id[:12]}:{src} into {dest} failed: {exc}") from exc
    finally:
        tree.close()
    return written


def export_tar_gz(
    api: docker.APIClient,
    container_id: str,
    src: str,
    dest_file: Path,
    *,
    exclude: Exclude | None = None,
    protected: Collection[str] = (),
    protected_hashes: Mapping[str, int] | None = None,
    limits: CopyLimits | None = None,
) -> list[str]:
    """Write the contents of directory ``src`` as a gzip tarball, names relative to ``src``.

    The file is written atomically (fsynced temporary file, then rename; mode 0600), and
    nothing is left behind when the copy is refused. Returns the entries.
    """
    budget = Budget(limits or CopyLimits(), f"{container_id[:12]}:{src}")
    names: list[str] = []
    try:
        with (
            open_members(api, container_id, src, budget, protected=protected,
                         protected_hashes=protected_hashes,
                         spool_dir=dest_file.parent) as members,
            atomic_open(dest_file, mode=0o600) as fh,
            tarfile.open(fileobj=fh, mode="w:gz", format=tarfile.PAX_FORMAT) as out,
        ):
            for m in _kept(members, exclude, budget):
                info = tarfile.TarInfo(m.rel)
                info.mode = m.mode
                if m.kind == FILE:
                    info.size = m.size
                elif m.kind == DIR:
                    info.type = tarfile.DIRTYPE
                elif m.kind == SYMLINK:
                    info.type, info.linkname = tarfile.SYMTYPE, m.linkname
                else:
                    info.type, info.linkname = tarfile.LNKTYPE, m.linkname
                out.addfile(info, m.data)
                names.append(m.rel)
    except OSError as exc:
        raise CopyFailed(
            f"exporting {container_id[:12]}:{src} to {dest_file} failed: {exc}"
        ) from exc
    return names
