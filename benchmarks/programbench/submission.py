"""``submission.tar.gz``: the workspace packed the way ``programbench eval`` unpacks it
(``tar -C /workspace -xzf -`` as root).

:func:`pack_members` packs a stream of :class:`~harness.sandbox.transfer.Member` records:
straight from the sandbox's archive (:mod:`benchmarks.programbench.collect`; the workspace is
never materialised on the host, and no program runs on it), or from a trusted host folder
(:func:`build_submission`, for tests and fixtures). Kept entries count against the copy-out
:class:`~harness.sandbox.transfer.Budget`.

Exclusion rules (paths relative to the workspace root):

* root only: ``executable``, ``reference_executable`` and the protected paths (eval deletes a
  shipped ``./executable`` anyway; the reference must never leave the sandbox);
* anywhere: files whose bytes equal a protected artifact (sha256), whatever their name,
  listed in ``protected_dropped``;
* directories at any depth: ``.git``, ``.ouroboros``, ``__pycache__``, ``.pytest_cache``,
  ``.ruff_cache``, ``.mypy_cache``, ``node_modules``, ``htmlcov``, and any directory holding a
  valid ``CACHEDIR.TAG`` (the Cache Directory Tagging spec; cargo's ``target/`` has one);
* files at any depth: ``.DS_Store``, ``.coverage``, ``coverage.xml``, ``*.pyc``, ``*.pyo``;
* build outputs: the top-level ``build/``, ``dist/`` and ``target/`` only, and only when git
  tracks no file inside them. Without a readable git repository they are kept. Which are
  tracked is asked of git inside the sandbox, as the agent user, never on the host.

Unlike the seed, a folder named ``build``/``dist`` below the root, or a ``*.log``/``*.tmp``
file, is source like any other and is kept: compile.sh may need it.

Archive layout: entry names without a ``./`` prefix (``compile.sh``, ``src/main.rs``); no
entry for the root itself, so unpacking never changes ``/workspace``'s own owner or mode;
sub-directories have entries (empty ones survive). For a stable sha256 on identical trees:
entries sorted by path (depth first, names in byte order: the order the daemon streams),
GNU format, uid/gid 0 with no names, mtime 2000-01-01T00:00:00Z (the date eval gives its
synthetic git commit), modes normalised to 0755 (directories and files with any execute bit)
or 0644, symlinks kept as links (inert entries, never resolved on the host), a second name
of an already packed file as a hard link, gzip header without name or time. Sockets, FIFOs,
devices and unsafe names are skipped and listed.
"""

from __future__ import annotations

import gzip
import os
import stat
import tarfile
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from harness.api import (
    DIR,
    FILE,
    HARDLINK,
    PROTECTED,
    PROTECTED_CONTENT,
    SPECIAL,
    SYMLINK,
    Budget,
    CopyLimits,
    InfraError,
    Member,
    ProtectedContent,
    hash_untrusted_file,
    open_regular,
    read_untrusted_bytes,
)

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
# Longest relative path kept: /workspace/ plus it stays well under Linux's PATH_MAX (4096).
MAX_PATH_BYTES = 3800


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
    protected_dropped: list[str] = Field(default_factory=list)  # bytes of a protected artifact
    content_bytes: int = 0  # regular files, uncompressed
    has_compile_sh: bool = False

    @property
    def empty(self) -> bool:
        return self.file_count == 0 and self.symlink_count == 0


@dataclass
class PackRules:
    """What to leave out, decided before packing (see the module docstring)."""

    protected: set[str] = field(default_factory=set)  # relative paths
    tracked_build_dirs: set[str] | None = None  # None: git could not tell (keep them all)
    is_cache_dir: Callable[[str], bool] = lambda rel: False  # holds a valid CACHEDIR.TAG


def normalise_protected(paths: Iterable[str]) -> set[str]:
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


def _key(rel: str) -> tuple[bytes, ...]:
    return tuple(rel.encode("utf-8", "surrogateescape").split(b"/"))


def _tarinfo(m: Member) -> tarfile.TarInfo:
    info = tarfile.TarInfo(m.rel)
    info.mtime = FIXED_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if m.kind == DIR:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    elif m.kind == SYMLINK:
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, m.linkname, 0o777
    else:
        info.mode = 0o755 if m.mode & 0o111 else 0o644
        if m.kind == HARDLINK:
            info.type, info.linkname = tarfile.LNKTYPE, m.linkname
        else:
            info.type, info.size = tarfile.REGTYPE, m.size
    return info


class _Packer:
    def __init__(self, rules: PackRules, budget: Budget) -> None:
        self.rules = rules
        self.budget = budget
        self.excluded: list[str] = []
        self.special: list[str] = []
        self.protected_dropped: list[str] = []
        self.build_dropped: list[str] = []
        self.build_kept: list[str] = []
        self.files: set[str] = set()
        self.counts = {"file": 0, "link": 0, "dir": 0, "bytes": 0}
        self.pruned: str | None = None
        self.last: tuple[bytes, ...] = ()

    def _skip(self, m: Member) -> bool:
        """True (and listed) when ``m`` stays out of the archive."""
        name = m.rel.rsplit("/", 1)[-1]
        at_root = "/" not in m.rel
        is_dir = m.kind == DIR
        if m.kind == PROTECTED_CONTENT:
            self.protected_dropped.append(m.rel)
            return True
        if m.kind == SPECIAL:
            self.special.append(m.rel)
            return True
        if len(m.rel.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
            # no eval could write it (PATH_MAX under /workspace): left out, and listed, so
            # a deep tree cannot make the official eval fail for the harness (a free retry)
            self.special.append(f"{m.rel[:120]}...({len(m.rel)} characters)")
            return True
        drop = m.kind == PROTECTED or m.rel in self.rules.protected
        if not drop and at_root and name in ROOT_ONLY_NAMES:
            drop = True
        if not drop and at_root and is_dir and name in BUILD_OUTPUT_DIRS:
            tracked = self.rules.tracked_build_dirs
            if tracked is not None and name not in tracked:
                self.build_dropped.append(name)
                drop = True
            else:
                self.build_kept.append(name)
        if not drop and is_dir:
            drop = name in CACHE_DIR_NAMES or self.rules.is_cache_dir(m.rel)
        elif not drop:
            drop = name in JUNK_FILE_NAMES or name.endswith(JUNK_SUFFIXES)
        if not drop and m.kind == HARDLINK and m.linkname not in self.files:
            drop = True  # its first name stayed out: the bytes are not in the archive
        if drop:
            self.excluded.append(m.rel + ("/" if is_dir else ""))
            if is_dir:
                self.pruned = m.rel
        return drop

    def add(self, tar: tarfile.TarFile, m: Member) -> None:
        key = _key(m.rel)
        if key <= self.last:
            raise InfraError(f"the daemon's archive is not in path order at {m.rel!r}: "
                             f"cannot pack it reproducibly", "archive_order")
        self.last = key
        if self.pruned is not None and m.rel.startswith(self.pruned + "/"):
            return
        self.pruned = None
        if self._skip(m):
            return
        self.budget.keep(m.size if m.kind == FILE else 0, m.rel)
        tar.addfile(_tarinfo(m), m.data if m.kind == FILE else None)
        if m.kind == DIR:
            self.counts["dir"] += 1
        elif m.kind == SYMLINK:
            self.counts["link"] += 1
        else:
            self.counts["file"] += 1
            self.counts["bytes"] += m.size
            self.files.add(m.rel)


def pack_members(
    members: Iterable[Member], dest: Path, *, rules: PackRules, budget: Budget
) -> SubmissionInfo:
    """Pack ``members`` (in path order) into ``dest``, written atomically.

    On any error (a :class:`~harness.sandbox.transfer.CopyRefused` budget overrun included)
    nothing is left at ``dest``: neither a partial archive nor an older one.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.unlink(missing_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    packer = _Packer(rules, budget)
    try:
        with (
            open(tmp, "wb") as raw,
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz,
            tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar,
        ):
            for m in members:
                packer.add(tar, m)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    c = packer.counts
    return SubmissionInfo(
        path=str(dest),
        sha256=hash_untrusted_file(dest)[0],
        size_bytes=dest.stat().st_size,
        file_count=c["file"],
        symlink_count=c["link"],
        dir_count=c["dir"],
        excluded_count=len(packer.excluded),
        excluded=packer.excluded[:MAX_LISTED],
        build_dirs_dropped=sorted(packer.build_dropped),
        build_dirs_kept=sorted(packer.build_kept),
        skipped_special=packer.special[:MAX_LISTED],
        protected_dropped=packer.protected_dropped[:MAX_LISTED],
        content_bytes=c["bytes"],
        has_compile_sh="compile.sh" in packer.files,
    )


def _has_cachedir_tag(folder: Path) -> bool:
    try:
        return read_untrusted_bytes(folder / CACHEDIR_TAG, 1 << 16).startswith(
            CACHEDIR_SIGNATURE)
    except OSError:
        return False


def _host_members(
    root: Path, guard: ProtectedContent, prefix: str = ""
) -> Iterator[Member]:
    """A host folder as archive members, in the daemon's order (links never followed)."""
    with os.scandir(root / prefix if prefix else root) as it:
        children = sorted(it, key=lambda e: os.fsencode(e.name))
    for child in children:
        rel = prefix + child.name
        st = child.stat(follow_symlinks=False)
        mode = stat.S_IMODE(st.st_mode) & 0o777
        if stat.S_ISDIR(st.st_mode):
            yield Member(rel, DIR, mode=mode)
            yield from _host_members(root, guard, rel + "/")
        elif stat.S_ISLNK(st.st_mode):
            yield Member(rel, SYMLINK, mode=0o777, linkname=os.readlink(child.path))
        elif stat.S_ISREG(st.st_mode):
            opened = open_regular(child.path)
            if opened is None:
                yield Member(rel, SPECIAL)
                continue
            with opened as fh:
                m = Member(rel, FILE, size=os.fstat(fh.fileno()).st_size, mode=mode, data=fh)
                data = guard.data(m)
                if data is None:
                    yield Member(rel, PROTECTED_CONTENT, size=m.size)
                    continue
                m.data = data
                try:
                    yield m
                finally:
                    data.close()
        else:
            yield Member(rel, SPECIAL)


def build_submission(
    workspace: Path,
    dest: Path,
    *,
    protected_paths: Iterable[str] = (),
    tracked_build_dirs: Collection[str] | None = None,
    protected_hashes: Mapping[str, int] | None = None,
    limits: CopyLimits | None = None,
) -> SubmissionInfo:
    """Pack a trusted host folder ``workspace`` into ``dest`` (tests, fixtures, tools).

    Agent workspaces never come here: they are packed from the sandbox's archive
    (:mod:`benchmarks.programbench.collect`). ``tracked_build_dirs`` are the top-level build
    dirs git tracks files in (None: unknown, keep them).
    """
    workspace = Path(workspace)
    if not workspace.is_dir():
        raise NotADirectoryError(f"workspace {workspace} is not a directory")
    rules = PackRules(
        protected=normalise_protected(protected_paths),
        tracked_build_dirs=None if tracked_build_dirs is None else set(tracked_build_dirs),
        is_cache_dir=lambda rel: _has_cachedir_tag(workspace / rel),
    )
    guard = ProtectedContent(protected_hashes or {})
    budget = Budget(limits or CopyLimits(), str(workspace))
    return pack_members(_host_members(workspace, guard), dest, rules=rules, budget=budget)


def list_submission(path: Path) -> list[str]:
    """Entry names of a ``submission.tar.gz`` (directories end with ``/``), in archive order."""
    with tarfile.open(path, "r:gz") as tar:
        return [m.name + ("/" if m.isdir() else "") for m in tar.getmembers()]
