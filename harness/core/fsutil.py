"""Crash-safe file primitives: atomic replace and fsynced appends."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_open(path: Path, mode: int = 0o644) -> Iterator[BinaryIO]:
    """Write ``path`` through a temporary binary file beside it, atomically.

    On a clean exit the file is fsynced, given ``mode`` and renamed over ``path`` (a reader
    sees the old or the new file, never half); on an exception it is removed and ``path``
    is left untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` so a reader sees the old or the new file, never half."""
    with atomic_open(path, mode) as fh:
        fh.write(data)


def create_exclusive(path: Path, data: bytes, mode: int = 0o644) -> bool:
    """Create ``path`` holding ``data`` only if it does not exist yet; False if it does.

    Hard-link publish: readers see no file or the whole file, never a partial one, and of
    several concurrent creators exactly one wins.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
    finally:
        os.unlink(tmp)
    _fsync_dir(path.parent)
    return True


def atomic_write_text(path: Path, text: str, mode: int = 0o644) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode)


def dumps_json(data: Any) -> str:
    dump = getattr(data, "model_dump_json", None)  # a pydantic model (not imported here)
    if callable(dump) and not isinstance(data, type):
        return str(dump(by_alias=True, indent=2)) + "\n"
    return json.dumps(data, indent=2, sort_keys=False, default=str) + "\n"


def atomic_write_json(path: Path, data: Any, mode: int = 0o644) -> None:
    atomic_write_text(path, dumps_json(data), mode)


def append_line(path: Path, line: str) -> None:
    """Append one line (a newline is added) and fsync before returning."""
    if "\n" in line:
        raise ValueError("a ledger line must not contain a newline")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        data = (line + "\n").encode("utf-8")
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    if new:
        _fsync_dir(path.parent)


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)
