"""Internal networks for sandboxes that need sidecars (e.g. a PostgreSQL container).

An internal bridge network has no gateway to the outside: containers on it reach each
other (by container name, through Docker's embedded DNS) and nothing else.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import docker
from docker.errors import APIError

from harness.sandbox import labels as L
from harness.sandbox.client import get_client
from harness.sandbox.errors import NetworkCreateFailed


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
            labels=L.run_labels(run_id, instance_id, worker, run_root),
        )
    except APIError as exc:
        raise NetworkCreateFailed(
            f"creating network {name} failed: {exc.explanation or exc}"
        ) from exc
    return name


def remove_network(name: str, *, client: docker.DockerClient | None = None) -> None:
    client = client or get_client()
    with contextlib.suppress(docker.errors.NotFound):
        client.api.remove_network(name)
