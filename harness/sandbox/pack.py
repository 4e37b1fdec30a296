"""Tar streams into a container (``put_archive``): what the harness copies in.

Everything packed here comes from the host side and is trusted (the harness's own files, a
benchmark checkout): the agent's output leaves through :mod:`harness.sandbox.transfer`.

* :func:`pack_path`: a host file, or a directory's contents, at a container directory
  (modes, symlinks as symlinks, empty directories; optional owner override).
* :func:`pack_files` (:class:`NewFile`), :func:`pack_bytes` for one: files from bytes at absolute paths.
* :func:`pack_tree`: host paths each placed whole at a chosen name, some names left out
  (``.git``, caches); unpacked in a directory (:meth:`Sandbox.put_archive`).
* :func:`pack_dirs`: directories with their owners and modes. The daemon makes them, so a
  container without ``CAP_CHOWN`` (``cap_drop=ALL``) still gets another user's directory.
* :func:`join_tars`: several of these tars as one, for a single ``put_archive`` (each
  ``put_archive`` costs the daemon a process of its own).

The tars are unpacked by the daemon (:func:`put_archive`), which applies the owners in the
headers; no capability inside the container is used.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
import tempfile
from collections.abc import Callable, Collection, Iterable
from pathlib import Path, PurePosixPath
from typing import IO, NamedTuple

import docker
from docker.errors import APIError, NotFound

from harness.sandbox.errors import CopyFailed

_SPOOL = 32 << 20


def _owner_filter(uid: int | None, gid: int | None) -> Callable[[tarfile.TarInfo], tarfile.TarInfo]:
    def apply(info: tarfile.TarInfo) -> tarfile.TarInfo:
        if uid is not None:
            info.uid, info.uname = uid, ""
        if gid is not None:
            info.gid, info.gname = gid, ""
        return info

    return apply


def pack_path(
    src: Path, dest_dir: str, *, uid: int | None = None, gid: int | None = None
) -> IO[bytes]:
    """A tar of ``src`` (a file as itself, a directory as its contents) to unpack at ``/``.

    Names carry ``dest_dir`` as a prefix: the daemon refuses a relative symlink that
    climbs above the directory it unpacks into, so unpacking at ``/`` keeps links such
    as ``../../elsewhere``. Missing parents are created by the daemon (root, 0755).
    """
    prefix = dest_dir.strip("/")
    out = tempfile.SpooledTemporaryFile(max_size=_SPOOL)  # noqa: SIM115 (returned open)
    owner = _owner_filter(uid, gid)
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        if src.is_dir() and not src.is_symlink():
            for child in sorted(src.iterdir()):
                tar.add(str(child), arcname=posixpath.join(prefix, child.name), filter=owner)
        elif src.exists() or src.is_symlink():
            tar.add(
                str(src), arcname=posixpath.join(prefix, src.name), recursive=False, filter=owner
            )
        else:
            raise CopyFailed(f"copy_in: {src} does not exist")
    out.seek(0)
    return out  # type: ignore[return-value]


class NewFile(NamedTuple):
    """A file for :func:`pack_files`: an absolute ``path``, its bytes, mode, owner and
    modification time."""

    path: str
    data: bytes
    mode: int = 0o644
    uid: int = 0
    gid: int = 0
    mtime: float = 0


def pack_files(files: Iterable[NewFile]) -> bytes:
    """A tar of files at absolute paths, to unpack at ``/`` in one copy (missing parents:
    root's, 0755)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for f in files:
            info = tarfile.TarInfo(f.path.strip("/"))
            info.size, info.mode, info.uid, info.gid = len(f.data), f.mode, f.uid, f.gid
            info.mtime = f.mtime
            tar.addfile(info, io.BytesIO(f.data))
    return buf.getvalue()


def pack_bytes(
    path: str, data: bytes, *, mode: int, uid: int, gid: int, mtime: float = 0
) -> bytes:
    """A tar of one file at absolute ``path``, to unpack at ``/``."""
    return pack_files([NewFile(path, data, mode, uid, gid, mtime)])


def pack_tree(
    entries: Iterable[tuple[Path, str]],
    *,
    uid: int | None = None,
    gid: int | None = None,
    exclude_names: Collection[str] = (),
) -> bytes:
    """A tar of trusted host paths, each ``(path, name)`` added whole (recursively) as
    ``name``, to unpack in a directory with :meth:`Sandbox.put_archive`.

    Symlinks stay symlinks (never followed); an entry with any path component in
    ``exclude_names`` (e.g. ``.git``) is left out with everything below it; ``uid`` and
    ``gid`` override the owners.
    """
    owner = _owner_filter(uid, gid)
    excluded = frozenset(exclude_names)

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if not excluded.isdisjoint(PurePosixPath(info.name).parts):
            return None
        return owner(info)

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for src, name in entries:
            tar.add(str(src), arcname=name, recursive=True, filter=keep)
    return buf.getvalue()


class NewDir(NamedTuple):
    """A directory for :func:`pack_dirs`: an absolute ``path``, its owner, its mode and its
    modification time (the daemon sets a directory entry's time after it has unpacked the
    whole tar, so entries below it in the same tar leave it at ``mtime``)."""

    path: str
    uid: int = 0
    gid: int = 0
    mode: int = 0o755
    mtime: float = 0


def pack_dirs(dirs: Iterable[NewDir]) -> bytes:
    """A tar of directory entries to unpack at ``/``: each is created (missing parents
    root's, 0755), or an existing one gets the owner and mode named here."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in dirs:
            info = tarfile.TarInfo(d.path.strip("/"))
            info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, d.mode, d.uid, d.gid
            info.mtime = d.mtime
            tar.addfile(info)
    return buf.getvalue()


def join_tars(parts: Iterable[bytes]) -> bytes:
    """One tar holding every member of ``parts`` (complete tars whose names are relative to
    the same directory, e.g. ``/`` for :func:`pack_dirs` and :func:`pack_bytes`), in order:
    unpacked once it gives what unpacking each part in turn gives, members' names, owners,
    modes and data unchanged (the bytes are copied, not re-packed). Directory times differ
    only where a later part adds to a directory an earlier part names (see :class:`NewDir`)."""
    bodies = [_members_bytes(part) for part in parts]
    end = tarfile.BLOCKSIZE * 2  # the end-of-archive marker, padded to a whole record
    size = sum(b.nbytes for b in bodies) + end
    return b"".join([*bodies, bytes(end + (-size) % tarfile.RECORDSIZE)])


# Headers followed by data other than a regular file's: PAX and GNU extended headers.
_EXTENDED = frozenset({tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE,
                       tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK})  # fmt: skip
_NO_DATA = frozenset(tarfile.SUPPORTED_TYPES) - frozenset(tarfile.REGULAR_TYPES) - _EXTENDED
_ZERO_BLOCK = bytes(tarfile.BLOCKSIZE)


def _members_bytes(data: bytes) -> memoryview:
    """``data`` up to its end-of-archive marker: its members' headers and data.

    Walks the headers only (as :mod:`tarfile` does when it reads, data skipped by the
    header's size, or a PAX ``size`` record's): a checkout's thousands of members cost
    microseconds each, not a full :mod:`tarfile` parse."""
    view = memoryview(data)
    offset, pax_size = 0, None
    while True:
        header = view[offset : offset + tarfile.BLOCKSIZE]
        if len(header) < tarfile.BLOCKSIZE:
            raise CopyFailed(f"join_tars: a part ends at {offset} without an end-of-archive marker")
        if header == _ZERO_BLOCK:
            return view[:offset]
        kind, size = bytes(header[156:157]), _number(bytes(header[124:136]))
        if kind in (tarfile.GNUTYPE_SPARSE, tarfile.XGLTYPE):  # never written here: tarfile's
            return view[: _parsed_end(data)]
        data_at = offset + tarfile.BLOCKSIZE
        if kind in (tarfile.XHDTYPE, tarfile.SOLARIS_XHDTYPE):
            pax_size = _pax_size(bytes(view[data_at : data_at + size]))
        elif kind not in _EXTENDED:
            if pax_size is not None:
                size, pax_size = pax_size, None
            if kind in _NO_DATA:
                size = 0
        offset = data_at + -(-size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE


def _number(field: bytes) -> int:
    """A header's numeric field: octal text, or GNU base-256 (as :mod:`tarfile` reads it)."""
    if field[0] in (0o200, 0o377):
        n = int.from_bytes(field[1:], "big")
        return n - 256 ** (len(field) - 1) if field[0] == 0o377 else n
    return int(field.split(b"\0", 1)[0].strip() or b"0", 8)


def _parsed_end(data: bytes) -> int:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        while tar.next() is not None:
            pass
        return tar.offset


def _pax_size(records: bytes) -> int | None:
    """The ``size`` record of a PAX extended header (``"<len> size=<n>\\n"``), if any."""
    pos = 0
    while pos < len(records):
        space = records.find(b" ", pos)
        if space < 0 or not records[pos:space].isdigit():
            return None
        end = pos + int(records[pos:space])
        key, _, value = records[space + 1 : end - 1].partition(b"=")
        if key == b"size":
            return int(value)
        pos = end if end > pos else len(records)
    return None


def put_archive(
    api: docker.APIClient,
    container_id: str,
    what: str,
    data: IO[bytes] | bytes,
    *,
    at: str = "/",
) -> None:
    """Unpack a tar in the container's existing directory ``at``: ``/`` for the absolute
    names of :func:`pack_path`, :func:`pack_bytes` and :func:`pack_dirs`; the directory
    the names are relative to for :func:`pack_tree`. ``what`` names it in errors."""
    try:
        ok = api.put_archive(container_id, at, data)
    except (APIError, NotFound) as exc:
        raise CopyFailed(f"copy into {container_id[:12]}:{what} failed: {exc}") from exc
    if not ok:
        raise CopyFailed(f"copy into {container_id[:12]}:{what} was refused by the daemon")
