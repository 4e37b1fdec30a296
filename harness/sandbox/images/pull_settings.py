"""The pull policy and image references (a light module: the ``--pull`` option names them
at collection time, before any Docker call)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

PullPolicy = Literal["missing", "always", "never"]
POLICIES: tuple[str, ...] = ("missing", "always", "never")


@dataclass(frozen=True)
class PullSettings:
    policy: PullPolicy = "missing"
    mirror: str | None = None
    jobs: int = 2
    lock_dir: Path | None = None  # the run's state folder: per-run markers and locks
    retries: int = 3
    backoff_s: float = 2.0
    min_free_gb: float = 5.0
    pin: str | None = None  # sha256:... the image must have


def split_ref(ref: str) -> tuple[str, str]:
    """``(repository, tag)``; a missing tag is ``latest``. Digests are not accepted here."""
    if "@" in ref:
        raise ValueError(f"{ref}: expected repository:tag, not a digest reference")
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = ref.rsplit(":", 1)
        return repo, tag
    return ref, "latest"


def mirror_ref(ref: str, mirror: str | None) -> str:
    """The reference to pull: ``HOST[:PORT]/<repository>:<tag>`` with a mirror."""
    if not mirror:
        return ref
    host = mirror.strip().rstrip("/")
    if "://" in host:
        host = host.split("://", 1)[1]
    return f"{host}/{ref}"
