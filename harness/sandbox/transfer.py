"""Tar streams in and out of a container (``put_archive`` / ``get_archive``).

* In: a host file or directory (its contents), or bytes, packed with :mod:`tarfile`
  (modes, symlinks as symlinks, empty directories; optional owner override).
* Out: extract a container directory's contents into a host directory, or re-pack them
  as a ``.tar.gz`` whose entries are relative to that directory, with an exclusion
  predicate. What comes out was written by the agent, so extraction is defensive: no
  absolute or ``..`` names, nothing written through a symlink, no device nodes,
  setuid/setgid/sticky bits dropped, files owned by the host user. Symlinks themselves
  (also ones pointing outside the tree) are kept as symlinks.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
import tempfile
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import IO

import docker
from docker.errors import APIError, NotFound

from harness.fsutil import atomic_open
from harness.sandbox.errors import CopyFailed

Exclude = Callable[[str], bool]
_SPOOL = 32 << 20


class _ChunkReader(io.RawIOBase):
    """A readable file over an iterator of byte chunks (``get_archive``'s stream)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buf = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._buf:
            try:
                self._buf = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


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


def pack_bytes(
    path: str, data: bytes, *, mode: int, uid: int, gid: int, mtime: float = 0
) -> bytes:
    """A tar of one file at absolute ``path``, to unpack at ``/``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(path.strip("/"))
        info.size, info.mode, info.uid, info.gid = len(data), mode, uid, gid
        info.mtime = mtime
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def put_archive(
    api: docker.APIClient, container_id: str, what: str, data: IO[bytes] | bytes
) -> None:
    """Unpack a tar made by :func:`pack_path`/:func:`pack_bytes` at the container's ``/``."""
    try:
        ok = api.put_archive(container_id, "/", data)
    except (APIError, NotFound) as exc:
        raise CopyFailed(f"copy into {container_id[:12]}:{what} failed: {exc}") from exc
    if not ok:
        raise CopyFailed(f"copy into {container_id[:12]}:{what} was refused by the daemon")


def _open_archive(
    api: docker.APIClient, container_id: str, src: str
) -> tuple[tarfile.TarFile, str]:
    try:
        chunks, stat = api.get_archive(container_id, src, chunk_size=1 << 20)
    except (APIError, NotFound) as exc:
        raise CopyFailed(f"copy out of {container_id[:12]}:{src} failed: {exc}") from exc
    reader = io.BufferedReader(_ChunkReader(iter(chunks)), buffer_size=1 << 20)
    return tarfile.open(fileobj=reader, mode="r|"), str(stat.get("name") or posixpath.basename(src))


def _relative(name: str, top: str) -> str | None:
    """Path of an archive member relative to the copied directory; None for the root."""
    name = name.lstrip("/")
    if name in (top, top + "/"):
        return None
    if name.startswith(top + "/"):
        return name[len(top) + 1 :].rstrip("/")
    return name.rstrip("/")


def _excluded(rel: str, exclude: Exclude | None, dropped: list[str]) -> bool:
    if any(rel == d or rel.startswith(d + "/") for d in dropped):
        return True
    if exclude is not None and exclude(rel):
        dropped.append(rel)
        return True
    return False


def _hidden(protected: Collection[str], src: str) -> list[str]:
    """Protected absolute paths as paths relative to ``src`` (those inside it)."""
    root = posixpath.normpath(src)
    out = []
    for path in protected:
        path = posixpath.normpath(path)
        if path.startswith(root.rstrip("/") + "/"):
            out.append(path[len(root.rstrip("/")) + 1 :])
    return out


def extract_to(
    api: docker.APIClient,
    container_id: str,
    src: str,
    dest: Path,
    *,
    exclude: Exclude | None = None,
    protected: Collection[str] = (),
) -> list[str]:
    """Extract the contents of ``src`` (a directory, or one file) into ``dest``.

    Returns the relative paths written.
    """
    dest.mkdir(parents=True, exist_ok=True)
    tar, top = _open_archive(api, container_id, src)
    dropped = _hidden(protected, src)
    written: list[str] = []

    def keep(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
        rel = _relative(member.name, top)
        if rel is None or member.isdev() or _excluded(rel, exclude, dropped):
            return None
        attrs: dict[str, object] = {
            "name": rel,
            "uid": None,
            "gid": None,
            "uname": None,
            "gname": None,
        }
        if member.islnk():
            target = _relative(member.linkname, top)
            if target is None:
                return None
            attrs["linkname"] = target
        safe = tarfile.tar_filter(member.replace(**attrs, deep=False), path)  # type: ignore[arg-type]
        written.append(rel)
        return safe.replace(mode=member.mode & 0o777, deep=False)

    try:
        with tar:
            tar.extractall(dest, filter=keep)
    except (tarfile.TarError, OSError) as exc:
        raise CopyFailed(f"extracting {container_id[:12]}:{src} into {dest} failed: {exc}") from exc
    return written


def export_tar_gz(
    api: docker.APIClient,
    container_id: str,
    src: str,
    dest_file: Path,
    *,
    exclude: Exclude | None = None,
    protected: Collection[str] = (),
) -> list[str]:
    """Write the contents of directory ``src`` as a gzip tarball, names relative to ``src``.

    The file is written atomically (fsynced temporary file, then rename; mode 0600).
    Returns the entries.
    """
    dest_file.parent.mkdir(parents=True, exist_ok=True)
    tar, top = _open_archive(api, container_id, src)
    dropped = _hidden(protected, src)
    names: list[str] = []
    try:
        with (
            tar,
            atomic_open(dest_file, mode=0o600) as fh,
            tarfile.open(fileobj=fh, mode="w:gz", format=tarfile.PAX_FORMAT) as out,
        ):
            for member in tar:
                rel = _relative(member.name, top)
                if rel is None or _excluded(rel, exclude, dropped):
                    continue
                new = member.replace(name=rel, deep=False)
                if member.islnk():
                    target = _relative(member.linkname, top)
                    if target is None or _excluded(target, None, dropped):
                        continue
                    new = new.replace(linkname=target, deep=False)
                out.addfile(new, tar.extractfile(member) if member.isreg() else None)
                names.append(rel)
    except (tarfile.TarError, OSError) as exc:
        raise CopyFailed(
            f"exporting {container_id[:12]}:{src} to {dest_file} failed: {exc}"
        ) from exc
    return names
