"""``submission.tar.gz`` from a workspace folder on the host.

The runner first exports the sandbox's ``/workspace`` to a host folder; this module packs it
the way ``programbench eval`` unpacks it (``tar -C /workspace -xzf -`` as root).

Exclusion rules (paths relative to the workspace root):

* root only: ``executable``, ``reference_executable`` and the protected paths (eval deletes a
  shipped ``./executable`` anyway; the reference must never leave the sandbox);
* directories at any depth: ``.git``, ``.ouroboros``, ``__pycache__``, ``.pytest_cache``,
  ``.ruff_cache``, ``.mypy_cache``, ``node_modules``, ``htmlcov``, and any directory holding a
  valid ``CACHEDIR.TAG`` (the Cache Directory Tagging spec; cargo's ``target/`` has one);
* files at any depth: ``.DS_Store``, ``.coverage``, ``coverage.xml``, ``*.pyc``, ``*.pyo``;
* build outputs: the top-level ``build/``, ``dist/`` and ``target/`` only, and only when git
  tracks no file inside them. Without a readable git repository they are kept.

Unlike the seed, a folder named ``build``/``dist`` below the root, or a ``*.log``/``*.tmp``
file, is source like any other and is kept: compile.sh may need it.

Archive layout: entry names without a ``./`` prefix (``compile.sh``, ``src/main.rs``); no
entry for the root itself, so unpacking never changes ``/workspace``'s own owner or mode;
sub-directories have entries (empty ones survive). For a stable sha256 on identical trees:
entries sorted by path, GNU format, uid/gid 0 with no names, mtime 2000-01-01T00:00:00Z (the
date eval gives its synthetic git commit), modes normalised to 0755 (directories and files
with any execute bit) or 0644, symlinks kept as links, gzip header without name or time.
Sockets, FIFOs and devices are skipped and listed.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
import subprocess
import tarfile
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

ROOT_ONLY_NAMES = frozenset({"executable", "reference_executable"})
CACHE_DIR_NAMES = frozenset(
    {
        ".git",
        ".ouroboros",
        "__pycache__",
        ".pytest_cache",
        ".ruff_cache",
        ".mypy_cache",
        "node_modules",
        "htmlcov",
    }
)
JUNK_FILE_NAMES = frozenset({".DS_Store", ".coverage", "coverage.xml"})
JUNK_SUFFIXES = (".pyc", ".pyo")
BUILD_OUTPUT_DIRS = ("build", "dist", "target")
CACHEDIR_TAG = "CACHEDIR.TAG"
CACHEDIR_SIGNATURE = b"Signature: 8a477f597d28d172789f06886806bc55"
FIXED_MTIME = 946684800  # 2000-01-01T00:00:00Z
MAX_LISTED = 500


class SubmissionInfo(BaseModel):
    """What went into one ``submission.tar.gz``."""

    model_config = ConfigDict(extra="forbid")

    path: str
    sha256: str
    size_bytes: int
    file_count: int  # regular files
    symlink_count: int = 0
    dir_count: int = 0
    excluded_count: int = 0
    excluded: list[str] = Field(default_factory=list)  # first MAX_LISTED, dirs end with "/"
    build_dirs_dropped: list[str] = Field(default_factory=list)
    build_dirs_kept: list[str] = Field(default_factory=list)
    skipped_special: list[str] = Field(default_factory=list)
    unreadable: list[str] = Field(default_factory=list)
    has_compile_sh: bool = False

    @property
    def empty(self) -> bool:
        return self.file_count == 0 and self.symlink_count == 0


class _Walk:
    def __init__(self, root: Path, drop_top: set[str], protected: set[str]) -> None:
        self.root = root
        self.drop_top = drop_top
        self.protected = protected
        self.entries: list[tuple[str, os.stat_result, Path]] = []
        self.excluded: list[str] = []
        self.special: list[str] = []

    def _exclude(self, rel: str) -> None:
        self.excluded.append(rel)

    def run(self) -> None:
        self._walk(self.root, "")

    def _walk(self, folder: Path, prefix: str) -> None:
        with os.scandir(folder) as it:
            children = sorted(it, key=lambda e: e.name)
        for child in children:
            rel = f"{prefix}{child.name}"
            st = child.stat(follow_symlinks=False)
            is_dir = stat.S_ISDIR(st.st_mode)
            if self._excluded(rel, child.name, is_dir, Path(child.path), at_root=not prefix):
                self._exclude(rel + ("/" if is_dir else ""))
                continue
            if is_dir:
                self.entries.append((rel, st, Path(child.path)))
                self._walk(Path(child.path), rel + "/")
            elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                self.entries.append((rel, st, Path(child.path)))
            else:
                self.special.append(rel)

    def _excluded(self, rel: str, name: str, is_dir: bool, path: Path, *, at_root: bool) -> bool:
        if rel in self.protected:
            return True
        if at_root and (name in ROOT_ONLY_NAMES or name in self.drop_top):
            return True
        if is_dir:
            return name in CACHE_DIR_NAMES or _has_cachedir_tag(path)
        return name in JUNK_FILE_NAMES or name.endswith(JUNK_SUFFIXES)


def _has_cachedir_tag(folder: Path) -> bool:
    try:
        with open(folder / CACHEDIR_TAG, "rb") as fh:
            return fh.read(len(CACHEDIR_SIGNATURE)) == CACHEDIR_SIGNATURE
    except OSError:
        return False


def _tracked_build_dirs(root: Path, present: list[str]) -> set[str] | None:
    """Build-output dirs holding at least one git-tracked file; None when git cannot tell."""
    if not (root / ".git").exists():
        return None
    try:
        proc = subprocess.run(
            ["git", "-c", "safe.directory=*", "-C", str(root), "ls-files", "-z", "--", *present],
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    tracked = {p.split("/", 1)[0] for p in proc.stdout.decode(errors="replace").split("\0") if p}
    return tracked & set(present)


def _decide_build_dirs(root: Path) -> tuple[set[str], list[str]]:
    present = [d for d in BUILD_OUTPUT_DIRS if (root / d).is_dir() and not (root / d).is_symlink()]
    if not present:
        return set(), []
    tracked = _tracked_build_dirs(root, present)
    if tracked is None:
        return set(), present  # no git evidence: keep, never lose source
    drop = {d for d in present if d not in tracked}
    return drop, [d for d in present if d in tracked]


def _normalise_protected(paths: Iterable[str]) -> set[str]:
    out: set[str] = set()
    for p in paths:
        p = p.strip()
        if p.startswith("/workspace/"):
            p = p[len("/workspace/") :]
        while p.startswith("./"):
            p = p[2:]
        if p and not p.startswith("/"):
            out.add(p.rstrip("/"))
    return out


def _tarinfo(rel: str, st: os.stat_result, path: Path) -> tarfile.TarInfo:
    info = tarfile.TarInfo(rel)
    info.mtime = FIXED_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
    elif stat.S_ISLNK(st.st_mode):
        info.type = tarfile.SYMTYPE
        info.linkname = os.readlink(path)
        info.mode = 0o777
    else:
        info.type = tarfile.REGTYPE
        info.mode = 0o755 if st.st_mode & 0o111 else 0o644
        info.size = st.st_size
    return info


def build_submission(
    workspace: Path,
    dest: Path,
    *,
    protected_paths: Iterable[str] = (),
) -> SubmissionInfo:
    """Pack ``workspace`` into ``dest`` (written atomically) and describe the result."""
    workspace = Path(workspace)
    dest = Path(dest)
    if not workspace.is_dir():
        raise NotADirectoryError(f"workspace {workspace} is not a directory")
    drop_top, kept_build = _decide_build_dirs(workspace)
    walk = _Walk(workspace, drop_top, _normalise_protected(protected_paths))
    walk.run()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    counts = {"file": 0, "link": 0, "dir": 0}
    unreadable: list[str] = []
    try:
        with (
            open(tmp, "wb") as raw,
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz,
            tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar,
        ):
            for rel, st, path in walk.entries:
                info = _tarinfo(rel, st, path)
                if info.type == tarfile.REGTYPE:
                    try:
                        fh = open(path, "rb")  # noqa: SIM115 - closed below
                    except OSError:
                        unreadable.append(rel)
                        continue
                    with fh:
                        info.size = os.fstat(fh.fileno()).st_size
                        tar.addfile(info, fh)
                    counts["file"] += 1
                else:
                    tar.addfile(info)
                    counts["link" if info.type == tarfile.SYMTYPE else "dir"] += 1
        with open(tmp, "rb+") as fh2:
            os.fsync(fh2.fileno())
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    digest = hashlib.sha256(dest.read_bytes()).hexdigest()
    names = {rel for rel, _, _ in walk.entries}
    return SubmissionInfo(
        path=str(dest),
        sha256=digest,
        size_bytes=dest.stat().st_size,
        file_count=counts["file"],
        symlink_count=counts["link"],
        dir_count=counts["dir"],
        excluded_count=len(walk.excluded),
        excluded=walk.excluded[:MAX_LISTED],
        build_dirs_dropped=sorted(drop_top),
        build_dirs_kept=kept_build,
        skipped_special=walk.special[:MAX_LISTED],
        unreadable=unreadable[:MAX_LISTED],
        has_compile_sh="compile.sh" in names and "compile.sh" not in unreadable,
    )


def list_submission(path: Path) -> list[str]:
    """Entry names of a ``submission.tar.gz`` (directories end with ``/``), in archive order."""
    with tarfile.open(path, "r:gz") as tar:
        return [m.name + ("/" if m.isdir() else "") for m in tar.getmembers()]
