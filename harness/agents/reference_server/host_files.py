"""The reference server's file tools on a host workspace (``executor_ref.workspace_host_path``).

The specification's server works on the instance's workspace through its host path: the
sandbox bind-mounts that folder on ``/workspace``, commands run in the sandbox, files are
read and written on the host. Every name under that folder is the agent's, so the server
walks it as untrusted input:

* a path is relative, without ``..``; each directory is opened with ``O_NOFOLLOW`` from the
  one above (``openat``), so a symlink the agent planted (to ``/etc``, to the run root, to a
  folder it swaps in meanwhile) is never followed; the file itself is opened ``O_NOFOLLOW``
  and must be a regular file;
* a file the server writes takes the owner of the workspace folder (the sandbox's agent
  user), so the agent can change it, as the server's own user would on the real host;
* the protected artifacts of the task (``resource_policy.protected_artifacts`` with
  ``read_bytes`` denied) are refused by name; their bytes are not in the folder anyway (the
  reference stays in the sandbox's root filesystem, behind its launcher);
* a read is capped.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Collection
from pathlib import Path, PurePosixPath

MAX_READ_BYTES = 1 << 20


class HostFileRefused(ValueError):
    """A file step the server refuses; ``reason`` is a stable code."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class HostFiles:
    def __init__(self, root: Path, denied: Collection[str] = ()) -> None:
        self.root = Path(root)
        if not self.root.is_absolute():
            raise HostFileRefused(f"workspace_host_path {root} is not absolute", "bad_path")
        self.denied = {str(PurePosixPath(p)) for p in denied}

    def _parts(self, rel: str) -> list[str]:
        path = PurePosixPath(rel)
        if path.is_absolute() or ".." in path.parts or not path.parts:
            raise HostFileRefused(f"{rel!r} is not a path inside the workspace", "bad_path")
        return list(path.parts)

    def _open_dir(self, parts: list[str], *, create: bool) -> tuple[int, os.stat_result]:
        """A descriptor of the directory holding the last part, and the root's stat."""
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
        fd = os.open(self.root, flags)
        root = os.fstat(fd)
        try:
            for name in parts[:-1]:
                try:
                    nxt = os.open(name, flags, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(name, 0o755, dir_fd=fd)
                    nxt = os.open(name, flags, dir_fd=fd)
                    os.fchown(nxt, root.st_uid, root.st_gid)
                os.close(fd)
                fd = nxt
        except OSError as exc:
            os.close(fd)
            raise self._refusal(parts, exc) from None
        return fd, root

    @staticmethod
    def _refusal(parts: list[str], exc: OSError) -> HostFileRefused:
        rel = "/".join(parts)
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            return HostFileRefused(f"{rel!r} goes through a symlink or a non-directory; "
                                   f"not followed", "symlink")
        return HostFileRefused(f"{rel!r}: {exc.strerror}", "io_error")

    def _check_denied(self, rel: str) -> None:
        norm = str(PurePosixPath(rel))
        if norm in self.denied or f"/workspace/{norm}" in self.denied:
            raise HostFileRefused(f"{rel!r} is a protected artifact (read_bytes denied)",
                                  "protected_artifact")

    def _open_file(self, parts: list[str], flags: int, *, create: bool
                   ) -> tuple[int, os.stat_result]:
        """The last part opened ``O_NOFOLLOW`` (a regular file, else refused) below its
        directory, and the root's stat."""
        dfd, root = self._open_dir(parts, create=create)
        try:
            fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600, dir_fd=dfd)
        except OSError as exc:
            raise self._refusal(parts, exc) from None
        finally:
            os.close(dfd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise HostFileRefused(f"{'/'.join(parts)!r} is not a regular file", "not_a_file")
        return fd, root

    def write(self, rel: str, content: bytes, mode: int) -> None:
        parts = self._parts(rel)
        self._check_denied(rel)
        fd, root = self._open_file(parts, os.O_WRONLY | os.O_CREAT, create=True)
        try:
            os.ftruncate(fd, 0)
            os.fchown(fd, root.st_uid, root.st_gid)
            os.fchmod(fd, mode & 0o777)
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)

    def read(self, rel: str, limit: int = MAX_READ_BYTES) -> bytes:
        parts = self._parts(rel)
        self._check_denied(rel)
        fd, _ = self._open_file(parts, os.O_RDONLY, create=False)
        try:
            return os.read(fd, limit)
        finally:
            os.close(fd)
