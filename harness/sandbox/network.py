"""Internal networks for sandboxes that need sidecars (e.g. a PostgreSQL container).

Containers on one reach each other (by container name, through Docker's embedded DNS)
and nothing else. Measured on Docker 20.10: an ``internal=True`` bridge alone still
gives each container a default route to the bridge's gateway address, which is the
*host*: forwarding is dropped by iptables, but every host service listening on all
addresses answers. So the bridge is also created without an IPv4 address
(``com.docker.network.bridge.inhibit_ipv4``): the route then leads nowhere, and a
connect to any outside or host address fails with ``EHOSTUNREACH`` (after the ARP
timeout, ~3 s). IPv6 is disabled in the containers (Docker's default for networks
without ``--ipv6``).
"""

from __future__ import annotations

from pathlib import Path

import docker
from docker.errors import APIError

from harness.sandbox import labels as L
from harness.sandbox.client import get_client
from harness.sandbox.errors import CleanupFailed, NetworkCreateFailed


def create_internal_network(
    run_id: str,
    instance_id: str,
    worker: str,
    run_root: Path | str,
    *,
    client: docker.DockerClient | None = None,
) -> str:
    """Create a labelled ``internal=True`` bridge network; return its name.

    Pass the name as ``SandboxSpec.network``. ``sweep`` removes it with the run.
    """
    client = client or get_client()
    name = L.resource_name("harness-net", run_id, instance_id)
    try:
        client.api.create_network(
            name,
            driver="bridge",
            internal=True,
            check_duplicate=True,
            options={"com.docker.network.bridge.inhibit_ipv4": "true"},
            labels=L.run_labels(run_id, instance_id, worker, run_root),
        )
    except APIError as exc:
        raise NetworkCreateFailed(
            f"creating network {name} failed: {exc.explanation or exc}"
        ) from exc
    return name


def remove_network(name: str, *, client: docker.DockerClient | None = None) -> None:
    """Remove a network (gone already is fine); raises ``sandbox_cleanup_failed``."""
    client = client or get_client()
    try:
        client.api.remove_network(name)
    except docker.errors.NotFound:
        pass
    except APIError as exc:
        raise CleanupFailed(f"removing network {name} failed: {exc.explanation or exc}") from exc
