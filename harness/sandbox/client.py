"""Connect to the Docker daemon, with a clear error when it cannot be reached."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import docker
from docker.errors import DockerException

from harness.sandbox.errors import DockerUnavailable

DEFAULT_TIMEOUT_S = 120


def get_client(
    timeout: int = DEFAULT_TIMEOUT_S, environment: dict[str, str] | None = None
) -> docker.DockerClient:
    """A client from the environment (``DOCKER_HOST`` etc.; or ``environment``), pinged once.

    Raises :class:`DockerUnavailable` (``docker_unavailable``) when the daemon is not there.
    """
    try:
        client = docker.from_env(timeout=timeout, environment=environment)
        client.api.ping()
    except (DockerException, OSError) as exc:
        raise DockerUnavailable(
            f"cannot reach the Docker daemon ({type(exc).__name__}: {exc}); "
            "start it (e.g. `service docker start`) or set DOCKER_HOST"
        ) from exc
    return client


@contextlib.contextmanager
def long_timeout(client: docker.DockerClient, seconds: int) -> Iterator[docker.APIClient]:
    """Raise the API client's read timeout for one slow call (image import, build).

    docker-py has no per-call timeout for ``import_image``/``build``; the client's
    ``timeout`` attribute is what its ``_post`` uses.
    """
    api = client.api
    old = api.timeout
    api.timeout = max(seconds, old or 0)
    try:
        yield api
    finally:
        api.timeout = old
