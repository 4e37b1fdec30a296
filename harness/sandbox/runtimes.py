"""OCI runtimes registered with the Docker daemon (``--runtime``, e.g. gVisor's ``runsc``).

A runtime is chosen per container (``HostConfig.Runtime``); the daemon must know it by name
(``"runtimes"`` in ``/etc/docker/daemon.json``, reloaded on SIGHUP). :func:`runtime_entry`
checks the name before a run starts and returns what the daemon runs for it (path and
arguments), for the manifest.
"""

from __future__ import annotations

from typing import Any

import docker

REGISTER_HINT = (
    "run scripts/setup.sh (it installs and registers runsc) or add it under \"runtimes\" "
    "in /etc/docker/daemon.json and send dockerd SIGHUP"
)


class RuntimeNotRegistered(ValueError):
    """The Docker daemon has no OCI runtime of the requested name."""


def registered_runtimes(client: docker.DockerClient) -> dict[str, dict[str, Any]]:
    """The daemon's runtimes by name (``docker info``'s ``Runtimes``)."""
    runtimes = client.api.info().get("Runtimes") or {}
    return {str(k): dict(v or {}) for k, v in runtimes.items()}


def runtime_entry(name: str, client: docker.DockerClient) -> dict[str, Any]:
    """``{"name", "path", "args"}`` of runtime ``name``; :class:`RuntimeNotRegistered` if absent."""
    runtimes = registered_runtimes(client)
    if name not in runtimes:
        known = ", ".join(sorted(runtimes)) or "none"
        raise RuntimeNotRegistered(
            f"--runtime {name}: the Docker daemon has no runtime of that name "
            f"(registered: {known}); {REGISTER_HINT}"
        )
    entry = runtimes[name]
    return {"name": name, "path": entry.get("path"), "args": list(entry.get("runtimeArgs") or [])}
