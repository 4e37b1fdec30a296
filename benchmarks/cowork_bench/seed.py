"""The agent's seed inside the agent container (``--agent command --agent-repo DIR``).

The checkout named by ``--agent-repo`` (recorded by the runner at admission: its HEAD, the
digests of its ``git status`` and tracked diff, ``extra.agent_source`` of the manifest) is
*copied* into every agent container at :data:`SEED_PATH` (``/opt/agent_seed``), owned by
root and not writable by the agent user, and the command runs with
``$HARNESS_AGENT_REPO`` naming it. A copy rather than a bind mount: each attempt runs a
snapshot of exactly what was recorded (a checkout edited during the run cannot change
the code of a running attempt), nothing of the host's filesystem is exposed to the
container, and it works on a remote Docker engine.

What is copied: the files git lists (tracked ones, those of submodules included, and, only
when ``--allow-dirty-seed`` let a dirty checkout in, untracked files that are not ignored),
as they are in the working tree, symlinks as symlinks (never followed: a listed file under
a folder that is now a link is left out and listed in ``skipped``). Ignored files (a host
``.venv``, ``node_modules``, build output) are not part of the seed. Before copying, the
checkout's state is read again and compared with the recorded one: a checkout whose HEAD,
status or tracked diff changed since admission is not the recorded seed (``InfraError``
``seed_changed``: the operator's doing, never the agent's). The tar is built once per
process and reused by every instance of that process.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.api import InfraError

SEED_PATH = "/opt/agent_seed"
SEED_ENV = "HARNESS_AGENT_REPO"
SEED_RECORD = "agent_seed.json"
MAX_SEED_BYTES = 256 << 20  # file bytes copied into each container, at most
_COMPARED = ("head", "status_sha256", "tracked_diff_sha256")
_GIT_ENV_DROP = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                 "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_CEILING_DIRECTORIES")  # fmt: skip


class SeedRecord(BaseModel):
    """``agent_seed.json``: the seed copied into this instance's agent container."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: str = Field(default="harness.cowork.agent_seed.v1", alias="schema")
    repo_dir: str
    commit: str
    dirty: bool
    path: str = SEED_PATH
    env: str = SEED_ENV
    files: int
    bytes: int
    tar_sha256: str
    skipped: list[str] = Field(default_factory=list)  # listed: not a file/link, or under a link

    def summary(self) -> dict[str, Any]:
        return {
            "commit": self.commit,
            "dirty": self.dirty,
            "path": self.path,
            "files": self.files,
            "bytes": self.bytes,
            "tar_sha256": self.tar_sha256,
        }


@dataclass(frozen=True)
class SeedTar:
    """The seed's record and its tar (names under ``opt/agent_seed/``, unpacked at ``/``)."""

    record: SeedRecord
    data: bytes


_CACHE: dict[tuple[str, ...], SeedTar] = {}


def _git(repo: Path, *args: str) -> bytes:
    env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV_DROP}
    env.update(GIT_OPTIONAL_LOCKS="0", LC_ALL="C")
    try:
        proc = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, env=env, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InfraError(f"reading the agent seed {repo}: {exc}", "seed_unavailable") from exc
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip()[-300:]
        raise InfraError(f"git {args[0]} in {repo}: {err}", "seed_unavailable")
    return proc.stdout


def _ls_files(repo: Path, *args: str) -> list[str]:
    out = _git(repo, "ls-files", "-z", *args).decode("utf-8", "surrogateescape")
    return [p for p in out.split("\0") if p]


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def checkout_state(repo: Path) -> dict[str, str]:
    """HEAD and the digests the run recorded at admission (``extra.agent_source``, the same
    git commands and digests as :mod:`harness.core.git`)."""
    status = _git(repo, "status", "--porcelain", "--untracked-files=normal")
    return {
        "head": _git(repo, "rev-parse", "--verify", "HEAD^{commit}").decode().strip(),
        "status_sha256": _digest(status),
        "tracked_diff_sha256": _digest(
            _git(repo, "diff", "HEAD", "--binary", "--no-color", "--no-ext-diff")
        ),
        "dirty": "yes" if status.strip() else "",
    }


def _dir_entry(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.uid, info.gid, info.mtime = tarfile.DIRTYPE, 0o755, 0, 0, 0
    return info


def _is_dir(path: Path) -> bool:
    """``path`` is a directory itself, not a link to one (its parents are checked first)."""
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def build_seed_tar(repo: Path, *, commit: str, dirty: bool, untracked: bool) -> SeedTar:
    """The tar of the checkout's files (see the module docstring), owned by root: files
    0644 (0755 when executable for their owner), directories 0755, mtime 0."""
    names = sorted(set(_ls_files(repo, "--cached", "--recurse-submodules")
                       + (_ls_files(repo, "--others", "--exclude-standard") if untracked
                          else [])))  # fmt: skip
    prefix = SEED_PATH.strip("/")
    buf = io.BytesIO()
    dirs: set[str] = set()
    total = files = 0
    skipped: list[str] = []
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(_dir_entry(prefix))
        for name in names:
            parents = ["/".join(name.split("/")[:i]) for i in range(1, name.count("/") + 1)]
            up = next((p for p in parents if p not in dirs and not _is_dir(repo / p)), None)
            if up is not None:  # under a link (never followed out of the checkout), or gone
                if os.path.lexists(repo / up):
                    skipped.append(name)
                continue
            path = repo / name
            try:
                st = path.lstat()
            except OSError:  # deleted in a dirty tree
                continue
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                skipped.append(name)
                continue
            for parent in parents:
                if parent not in dirs:
                    dirs.add(parent)
                    tar.addfile(_dir_entry(f"{prefix}/{parent}"))
            info = tarfile.TarInfo(f"{prefix}/{name}")
            info.uid = info.gid = 0
            info.mtime = 0
            if stat.S_ISLNK(st.st_mode):
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, os.readlink(path), 0o777
                tar.addfile(info)
            else:
                total += st.st_size
                if total > MAX_SEED_BYTES:
                    raise InfraError(
                        f"the agent seed {repo} holds more than "
                        f"{MAX_SEED_BYTES >> 20} MiB of files",
                        "seed_too_large",
                    )
                info.size = st.st_size
                info.mode = 0o755 if st.st_mode & stat.S_IXUSR else 0o644
                with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as fh:
                    tar.addfile(info, fh)
            files += 1
    data = buf.getvalue()
    record = SeedRecord(repo_dir=str(repo), commit=commit, dirty=dirty, files=files,
                        bytes=total, tar_sha256="sha256:" + hashlib.sha256(data).hexdigest(),
                        skipped=skipped)  # fmt: skip
    return SeedTar(record, data)


def agent_seed(repo_dir: str | Path, recorded: dict[str, Any] | None, allow_dirty: bool) -> SeedTar:
    """The seed of ``repo_dir`` as the run recorded it (``recorded``: the manifest's
    ``extra.agent_source``); ``InfraError`` ``seed_changed`` when the checkout is no
    longer in that state."""
    repo = Path(repo_dir).resolve()
    now = checkout_state(repo)
    if recorded is not None:
        changed = [k for k in _COMPARED if recorded.get(k) != now[k]]
        if changed:
            raise InfraError(
                f"the agent checkout {repo} changed since the run was admitted "
                f"({', '.join(changed)} differ: recorded HEAD {recorded.get('head')}, now "
                f"{now['head']}); restore it or start a new run",
                "seed_changed",
            )
    dirty = bool(now["dirty"])
    if dirty and not allow_dirty:
        raise InfraError(
            f"the agent checkout {repo} is dirty (commit, or pass --allow-dirty-seed)",
            "seed_changed",
        )
    key = (str(repo), *(now[k] for k in _COMPARED))
    if key not in _CACHE:
        _CACHE.clear()  # one seed per run
        _CACHE[key] = build_seed_tar(repo, commit=now["head"], dirty=dirty, untracked=dirty)
    return _CACHE[key]
