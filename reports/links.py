"""Relative links from the report's folder to an instance's files under the run root."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

from reports.figures import InstanceResult

MAX_FILES = 20


def href(target: Path, output_dir: Path) -> str:
    """The link from ``output_dir`` to ``target``, both absolute paths without symlinks."""
    return quote(Path(os.path.relpath(target, output_dir)).as_posix())


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def instance_links(
    run_root: Path, result: InstanceResult, output_dir: Path
) -> list[tuple[str, str]]:
    """``(label, href)`` pairs: the instance folder, the row's named outputs, then its files.

    ``run_root`` and ``output_dir`` are resolved paths (the caller resolves them once: a
    10,000-row report spent most of its time resolving the same two folders per row).
    """
    folder = run_root / result.benchmark / result.instance_id
    links: list[tuple[str, str]] = []
    seen: set[Path] = set()
    if folder.is_dir():
        links.append(("folder", href(folder, output_dir) + "/"))
    for name, value in sorted(result.output_paths.items()):
        given = Path(value)
        candidates = [given] if given.is_absolute() else [run_root / given, folder / given]
        for path in candidates:
            if path.exists() and _inside(real := path.resolve(), run_root):
                links.append((name, href(real, output_dir)))
                seen.add(real)
                break
    if folder.is_dir():
        files, more = _walk(folder, MAX_FILES)
        for path in files:  # under the resolved folder: a file's own path, never followed
            if path not in seen:
                links.append((path.relative_to(folder).as_posix(), href(path, output_dir)))
        if more:
            links.append(("more files…", href(folder, output_dir) + "/"))
    return links


def _shared(path: Path) -> bool:
    try:
        return bool(path.lstat().st_mode & 0o077)
    except OSError:
        return False


def _walk(folder: Path, limit: int) -> tuple[list[Path], bool]:
    """Up to ``limit`` files under ``folder``, shallow ones first; True if there are more."""
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        # a private folder (no access for others, e.g. ProgramBench's host workspace while
        # a kept task still works in it) holds the agent's own files: not linked
        dirnames[:] = sorted(d for d in dirnames if _shared(Path(dirpath) / d))
        for name in sorted(filenames):
            if len(out) == limit:
                return out, True
            path = Path(dirpath) / name
            if not path.is_symlink():  # an agent's link (a host workspace) is never linked
                out.append(path)
    return out, False
