"""Labels and names of everything the sandbox layer creates.

Every container, network and volume carries ``harness.run``, ``harness.instance``,
``harness.runner.worker`` and ``harness.run_root``; cleanup selects by these exact labels. They also
carry their owner (host id, boot, PID namespace, pid: :mod:`harness.sandbox.lease_identity`),
which the stale sweep uses with the run's lease (:mod:`harness.sandbox.lease`).
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Mapping
from pathlib import Path

from harness.sandbox.lease_identity import current_owner

RUN = "harness.run"
INSTANCE = "harness.instance"
WORKER = "harness.worker"
RUN_ROOT = "harness.run_root"
TTL = "harness.ttl_s"
ENGINE = "harness.engine"  # the engine's URL, when the run places instances on engines
RECIPE = "harness.recipe"  # on built images: the recipe's content hash
# On a sandbox an agent server's task works in (``docker_exec``): while it runs, automatic
# sweeps leave it alone, so a resume can reattach to the task and its sandbox; its TTL
# (``sleep``, then ``auto_remove``) ends it when nobody does. ``harness sweep`` removes it.
REATTACH = "harness.reattach"

_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]+")

# Written in the run root before the run's first Docker resource is labelled: a run without
# it never created a container, network or volume, so its cleanup needs no Docker to prove.
DOCKER_USED_MARKER = ".docker_resources"
_marked: set[str] = set()

# Docker accepts long names, but names also end up in host names, logs and CLI output:
# keep them at most 63 characters.
MAX_NAME = 63


def run_labels(
    run_id: str,
    instance_id: str,
    worker: str,
    run_root: Path | str,
    owner: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The run's labels plus its owner's (``owner``: this process unless given)."""
    from harness.sandbox.placement import active

    mark_docker_used(run_root)
    slot = active()
    return {
        **({ENGINE: slot.engine.url} if slot is not None else {}),
        **(current_owner().labels() if owner is None else owner),
        RUN: run_id,
        INSTANCE: instance_id,
        WORKER: worker,
        RUN_ROOT: str(Path(run_root).absolute()),
    }


def mark_docker_used(run_root: Path | str) -> None:
    """Create the run root's :data:`DOCKER_USED_MARKER` (once per process and run root)."""
    root = str(Path(run_root).absolute())
    if root in _marked:
        return
    marker = Path(root) / DOCKER_USED_MARKER
    if Path(root).is_dir():
        marker.touch(exist_ok=True)
        _marked.add(root)


def docker_used(run_root: str | os.PathLike[str]) -> bool:
    """Whether any process of the run labelled a Docker resource with this run root."""
    return (Path(run_root) / DOCKER_USED_MARKER).exists()


def label_filters(run_id: str | None = None, worker: str | None = None) -> list[str]:
    """Docker ``label`` filter values (all must match)."""
    filters = [f"{RUN}={run_id}" if run_id is not None else RUN]
    if worker is not None:
        filters.append(f"{WORKER}={worker}")
    return filters


def _clean(part: str, limit: int) -> str:
    cleaned = _UNSAFE.sub("-", part).strip("-.") or "x"
    return cleaned[:limit].rstrip("-.") or "x"


def resource_name(kind: str, run_id: str, instance_id: str) -> str:
    """``<kind>-<run>-<instance>-<8 hex>``, sanitized and at most :data:`MAX_NAME` chars.

    The random suffix keeps names unique when ids are truncated or an instance runs twice.
    """
    suffix = secrets.token_hex(4)
    budget = MAX_NAME - len(kind) - len(suffix) - 3
    run_part = _clean(run_id, max(8, budget // 2))
    inst_part = _clean(instance_id, max(4, budget - len(run_part)))
    return f"{kind}-{run_part}-{inst_part}-{suffix}"[:MAX_NAME]
