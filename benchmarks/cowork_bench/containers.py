"""Cowork's container policy: who its containers run as, their limits and their labels.

The containers themselves are :mod:`harness.sandbox` resources (:class:`Sandbox`, created
from the :class:`SandboxSpec` that :func:`container_spec` builds): labelled with the run
(``harness.run``, ``harness.instance``, ``harness.runner.worker``, ``harness.run_root``) plus
``harness.cowork.role`` (``pg``, ``agent``, ``eval-<attempt>``); they run ``sleep <ttl>``
under Docker's init and expire by themselves. Teardown removes by the exact run and instance
labels (:meth:`RunIdentity.labels` with :func:`harness.sandbox.remove_labelled`) and lists
again to prove nothing is left. A caller holds the run's lock
(:func:`harness.sandbox.run_lock`) while it runs, so ``sweep_stale`` leaves it alone.

Every container drops all capabilities, sets ``no-new-privileges`` and has CPU, memory and
process limits (:class:`Limits`; options ``--cowork-cpus``, ``--cowork-memory``,
``--cowork-pids``). The agent container's own user is the unprivileged :data:`AGENT` (so a
``docker exec`` without ``-u``, e.g. a gateway's process tools, is not root); the harness's
set-up steps that need another owner go through the daemon
(:meth:`Sandbox.put_archive <harness.sandbox.Sandbox.put_archive>` and
:meth:`Sandbox.make_dirs <harness.sandbox.Sandbox.make_dirs>`, owners in the tar headers),
never through a capability inside the container.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.api import AGENT_UID, AGENT_USER, SandboxSpec, run_labels

ROLE_LABEL = "harness.cowork.role"
AGENT = AGENT_USER  # the unprivileged user of the runtime image
AGENT_ID = AGENT_UID  # its uid, and the gid of its files

DEFAULT_CPUS = 1.0  # per container (capped at the host's CPU count)
DEFAULT_MEMORY = "2g"  # per container, swap disabled
DEFAULT_PIDS = 1024  # per container


@dataclass(frozen=True)
class Limits:
    """Resource limits of every Cowork container (agent, eval, sidecar)."""

    cpus: float = DEFAULT_CPUS
    memory: str = DEFAULT_MEMORY
    pids: int = DEFAULT_PIDS


@dataclass(frozen=True)
class RunIdentity:
    """Whose resources these are: the run, the worker, the run root (for the labels)."""

    run_id: str
    run_root: Path
    worker: str = "main"

    def labels(self, instance_id: str) -> dict[str, str]:
        """The exact labels of this run's resources for ``instance_id`` (teardown's filter)."""
        return run_labels(self.run_id, instance_id, self.worker, self.run_root)


def container_spec(
    image: str,
    ident: RunIdentity,
    instance_id: str,
    *,
    network: str,
    role: str,
    env: Mapping[str, str] | None = None,
    ttl_s: int = 7200,
    limits: Limits | None = None,
    user: str = "0",
    runtime: str | None = None,
) -> SandboxSpec:
    """A container with no capabilities, ``no-new-privileges`` and ``limits``, on
    ``network``; ``user`` is its own user (``docker exec`` without ``-u``) and the default
    user of :meth:`Sandbox.exec <harness.sandbox.Sandbox.exec>` (root has no capabilities
    here); commands run in ``/`` unless told otherwise."""
    limits = limits or Limits()
    return SandboxSpec(
        image=image,
        run_id=ident.run_id,
        instance_id=instance_id,
        run_root=ident.run_root,
        worker=ident.worker,
        ttl_s=ttl_s,
        network=network,
        cpus=limits.cpus,
        memory=limits.memory,
        pids_limit=limits.pids,
        cap_drop=("ALL",),
        no_new_privileges=True,
        user="root" if user == "0" else user,
        container_user=user,
        workdir="/",
        env=dict(env or {}),
        labels={ROLE_LABEL: role},
        runtime=runtime,
    )
