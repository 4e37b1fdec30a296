"""Reading files an agent wrote: regular files only, no link following, bounded size.

Everything under an instance's exported workspace or agent folder was written by the agent
(DESIGN.md section 8). A plain ``Path.read_text()`` follows a symlink to ``/etc/shadow``,
blocks forever on a FIFO and reads ``/dev/zero`` until memory runs out. These helpers open
with ``O_NOFOLLOW | O_NONBLOCK``, check the opened descriptor is a regular file, and read
at most ``max_bytes`` (a larger file is refused, never truncated silently).
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path
from typing import IO

DEFAULT_MAX_BYTES = 16 << 20


def read_capped(fd: int, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of an open file: one byte past the cap tells a caller that
    the file is larger than allowed, without reading the rest."""
    chunks: list[bytes] = []
    left = limit + 1
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class UntrustedFileError(OSError):
    """An agent-written file that is not a regular file, or is larger than allowed."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path = path
        self.why = why


_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def _open(path: Path, max_bytes: int | None) -> int:
    """A descriptor on the regular file ``path`` of at most ``max_bytes`` (None: any size)."""
    try:
        fd = os.open(path, _FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last component is a symlink
            raise UntrustedFileError(path, "is a symbolic link (not followed)") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedFileError(path, "is not a regular file")
        if max_bytes is not None and st.st_size > max_bytes:
            raise UntrustedFileError(path, f"is {st.st_size} bytes, over the {max_bytes} cap")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_untrusted_bytes(path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The bytes of the regular file ``path``; refuse links, special files and big files.

    Only the last component is opened without following (``O_NOFOLLOW``): the parent
    directories must be ones the harness made or walked without following links. Copy-out
    guarantees it for the folders it writes (a copied folder the agent replaced by a link
    arrives as an empty real folder: tests/sandbox/test_sandbox_copy.py).
    """
    path = Path(path)
    fd = _open(path, max_bytes)
    try:
        data = read_capped(fd, max_bytes)
        if len(data) > max_bytes:
            raise UntrustedFileError(path, f"grew past the {max_bytes} byte cap while read")
        return data
    finally:
        os.close(fd)


def read_untrusted_head(path: Path, limit: int) -> bytes | None:
    """At most ``limit`` bytes of the regular file ``path``, whatever its size; None for a
    link, a special file, or one that cannot be opened."""
    try:
        fd = _open(Path(path), None)
    except (OSError, UntrustedFileError):
        return None
    try:
        return read_capped(fd, limit)[:limit]
    except OSError:
        return None
    finally:
        os.close(fd)


def read_untrusted_text(path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    return read_untrusted_bytes(path, max_bytes).decode("utf-8", errors="replace")


def open_regular(path: Path | str) -> IO[bytes] | None:
    """``path`` opened for reading if it is (still) a regular file, else None: links never
    followed, FIFOs and devices never opened for reading (``O_NONBLOCK``)."""
    try:
        fd = os.open(path, _FLAGS)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


def is_regular_file(path: Path) -> bool:
    """True for a regular file that is not a symlink (``lstat``, never follows)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def hash_untrusted_file(path: Path, max_bytes: int | None = None) -> tuple[str, int]:
    """``(sha256 hex, size)`` of the regular file ``path``, streamed (never whole in memory).

    Same refusals as :func:`read_untrusted_bytes` (links, special files); ``max_bytes``
    (None: no cap, the caller bounded the tree already) refuses a larger file.
    """

    path = Path(path)
    fd = _open(path, max_bytes)
    try:
        digest, size = hashlib.sha256(), 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            size += len(chunk)
            if max_bytes is not None and size > max_bytes:
                raise UntrustedFileError(path, f"grew past the {max_bytes} byte cap while read")
            digest.update(chunk)
        return digest.hexdigest(), size
    finally:
        os.close(fd)
