"""Connect to the Docker daemon, with a clear error when it cannot be reached."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import docker
from docker.errors import DockerException

from harness.sandbox.active_engine import instance_environment
from harness.sandbox.errors import DockerUnavailable

DEFAULT_TIMEOUT_S = 120


class _EngineAPIClient(docker.APIClient):  # type: ignore[misc]
    def merge_environment_settings(
        self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any
    ) -> dict[str, Any]:
        settings: dict[str, Any] = super().merge_environment_settings(
            url, proxies, stream, verify, cert
        )
        if isinstance(self.verify, str) and verify in (None, True):
            settings["verify"] = self.verify  # the engine's own CA, not the environment's
        return settings


class EngineClient(docker.DockerClient):  # type: ignore[misc]
    """``docker.DockerClient`` that verifies a TLS engine with its own CA.

    docker-py puts ``DOCKER_CERT_PATH``'s ``ca.pem`` on its requests session, but requests
    replaces a session's CA with ``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE`` on every request
    whose caller gave none (all of docker-py's): with either variable set (common where a
    corporate CA is installed) every TLS engine with a private CA fails verification. Only
    the CA is pinned; proxies still come from the environment.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # not DockerClient.__init__: its api
        self.api = _EngineAPIClient(*args, **kwargs)


def get_client(
    timeout: int = DEFAULT_TIMEOUT_S, environment: dict[str, str] | None = None
) -> docker.DockerClient:
    """A client of ``environment`` (``DOCKER_HOST`` etc.), pinged once. Without one: the
    engine of the instance this process runs (:func:`harness.sandbox.active_engine.
    instance_environment`: the placed slot's engine, else this process's environment).

    Raises :class:`DockerUnavailable` (``docker_unavailable``) when the daemon is not there.
    """
    if environment is None:
        environment = instance_environment()
    try:
        client = EngineClient.from_env(timeout=timeout, environment=environment)
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
