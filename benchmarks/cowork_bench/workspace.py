"""The agent workspace on the host: made inert after copy-out, packed for the eval container.

Everything under ``<instance>/workspace`` was written by the agent. After copy-out,
:func:`sanitise_workspace` removes

* every symbolic link that leaves the workspace: an absolute target, or a relative one
  that, resolved inside the workspace tree (following the tree's own links, never the
  host's), climbs out of it or loops. Such a link means nothing in the agent's container
  that the agent could not have copied, but in the eval container it could reach the
  groundtruth (``ln -s /workspace/tasks/finalpool/<task>/groundtruth_workspace/<file>``)
  and in the host it could reach anything. Links that stay inside are kept: they can only
  name the agent's own files, and an honest agent may use them;
* every special file (FIFO, socket, device): nothing a checker grades, and a hang or an
  endless read for whoever opens it.

What was removed is listed in ``workspace_sanitised.json`` (:class:`WorkspaceSanitised`)
and in the row. :func:`pack_workspace` builds the tar the eval container receives without
ever following a link on the host (``lstat`` walk, files opened ``O_NOFOLLOW`` and checked
regular on the open descriptor), applying the same rules again.
"""

from __future__ import annotations

import os
import stat
import tarfile
import tempfile
from pathlib import Path
from typing import IO, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.api import open_regular

SANITISED_NAME = "workspace_sanitised.json"
MAX_LINK_HOPS = 40  # like the kernel's MAXSYMLINKS
_SPOOL = 32 << 20


class RemovedEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str  # relative to the workspace
    kind: Literal["symlink", "fifo", "socket", "char_device", "block_device", "other"]
    target: str | None = None  # a link's target, as written by the agent
    why: str


class WorkspaceSanitised(BaseModel):
    """``workspace_sanitised.json``: what was removed from the copied-out workspace."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: str = Field(default="harness.cowork.workspace_sanitised.v1", alias="schema")
    removed: list[RemovedEntry] = Field(default_factory=list)
    kept_links: int = 0


def _special_kind(mode: int) -> Literal["fifo", "socket", "char_device", "block_device", "other"]:
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode):
        return "char_device"
    if stat.S_ISBLK(mode):
        return "block_device"
    return "other"


def link_escape(root: Path, rel: str) -> str | None:
    """Why the link at ``rel`` (relative to ``root``) leaves the tree, or None if it stays.

    Resolution is done component by component inside ``root``: each component is
    ``lstat``-ed under an already resolved, link-free prefix, so no host link is followed.
    """
    parent = list(Path(rel).parts[:-1])
    why, _ = _resolve(root, parent, os.readlink(root / rel), [0])
    return why


def _resolve(
    root: Path, base: list[str], target: str, hops: list[int]
) -> tuple[str | None, list[str]]:
    """(why it escapes or None, the resolved components relative to ``root``)."""
    if os.path.isabs(target):
        return "absolute target", []
    cur = list(base)
    for part in Path(target).parts:
        if part in ("", "."):
            continue
        if part == "..":
            if not cur:
                return "relative target climbs out of the workspace", []
            cur.pop()
            continue
        candidate = [*cur, part]
        try:
            st = os.lstat(root.joinpath(*candidate))
        except OSError:  # missing (or not a directory): the rest is lexical
            cur = candidate
            continue
        if stat.S_ISLNK(st.st_mode):
            hops[0] += 1
            if hops[0] > MAX_LINK_HOPS:
                return "too many levels of links", []
            why, cur = _resolve(root, cur, os.readlink(root.joinpath(*candidate)), hops)
            if why is not None:  # name the first link of the chain only
                prefix = "" if why.startswith("through ") else f"through {'/'.join(candidate)}: "
                return prefix + why, []
            continue
        cur = candidate
    return None, cur


def _walk(root: Path) -> list[tuple[str, os.stat_result]]:
    """Every entry below ``root`` (relative path, lstat), parents first; links not entered."""
    out: list[tuple[str, os.stat_result]] = []
    stack = [""]
    while stack:
        rel = stack.pop()
        with os.scandir(root / rel if rel else root) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            child = f"{rel}/{entry.name}" if rel else entry.name
            st = entry.stat(follow_symlinks=False)
            out.append((child, st))
            if stat.S_ISDIR(st.st_mode):
                stack.append(child)
    return sorted(out, key=lambda item: item[0])


def sanitise_workspace(root: Path) -> WorkspaceSanitised:
    """Remove links that leave ``root`` and special files; see the module docstring."""
    record = WorkspaceSanitised()
    root = Path(root)
    if not root.is_dir() or root.is_symlink():
        return record
    for rel, st in _walk(root):  # decide on the whole tree first, then remove
        mode = st.st_mode
        if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
            continue
        if stat.S_ISLNK(mode):
            why = link_escape(root, rel)
            if why is None:
                record.kept_links += 1
            else:
                record.removed.append(RemovedEntry(
                    path=rel, kind="symlink", target=os.readlink(root / rel), why=why))  # fmt: skip
            continue
        record.removed.append(
            RemovedEntry(path=rel, kind=_special_kind(mode), why="special file, not copied")
        )
    for entry in record.removed:
        os.unlink(root / entry.path)
    return record


def pack_workspace(root: Path, *, uid: int = 0, gid: int = 0) -> IO[bytes]:
    """A tar of the workspace's contents for ``put_archive`` at the workspace directory.

    Directories, regular files and links that stay inside only (the same rules as
    :func:`sanitise_workspace`); modes lose setuid/setgid/sticky; owners are ``uid:gid``.
    Spooled to disk past 32 MiB; the caller closes it.
    """
    root = Path(root)
    out = tempfile.SpooledTemporaryFile(max_size=_SPOOL)  # noqa: SIM115 (returned open)
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        if root.is_dir() and not root.is_symlink():
            for rel, st in _walk(root):
                info = tarfile.TarInfo(rel)
                info.mode = st.st_mode & 0o777
                info.mtime = int(st.st_mtime)
                info.uid, info.gid = uid, gid
                if stat.S_ISDIR(st.st_mode):
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                elif stat.S_ISLNK(st.st_mode):
                    if link_escape(root, rel) is not None:
                        continue
                    info.type, info.linkname = tarfile.SYMTYPE, os.readlink(root / rel)
                    tar.addfile(info)
                elif stat.S_ISREG(st.st_mode):
                    fh = open_regular(root / rel)
                    if fh is None:
                        continue
                    with fh:
                        info.size = os.fstat(fh.fileno()).st_size
                        tar.addfile(info, fh)
    out.seek(0)
    return out  # type: ignore[return-value]
