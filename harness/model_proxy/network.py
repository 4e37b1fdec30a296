"""How the sandbox reaches the gateway and nothing else.

Per instance: an internal Docker network without a host address
(:func:`harness.sandbox.network.create_internal_network`: no route anywhere), holding two
containers: the sandbox (moved there from ``--network none`` once its cleanroom preflight
passed) and a relay container, alias ``model-gateway``, whose one job is to copy bytes
between TCP port 8080 on that network and the gateway's Unix socket, bind-mounted from a
private host directory. The relay has no other network, runs read-only with every
capability dropped, and holds no key: the key stays in the harness process. The sandbox
sees ``http://model-gateway:8080/v1``.

A sandbox already on an internal network of its instance (``spec.network`` is not
``none``: a Cowork agent container on its task network, beside the database and the MCP
servers) keeps it: the relay joins that network under the same alias, and :meth:`close`
removes only the relay (the network is the instance's own, removed by its teardown).

What the link needs of a sandbox (its container id, its Docker client, its spec) is part of
the sandbox contract, :class:`harness.sandbox.protocol.Sandbox`, which the harness
:class:`~harness.sandbox.container.Sandbox` and Cowork's agent box both implement.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docker.errors import APIError, NotFound

from harness.core.errors import InfraError
from harness.sandbox import labels as L
from harness.sandbox.network import create_internal_network, remove_network
from harness.sandbox.protocol import Sandbox
from harness.sandbox.relay import TCP_TO_UNIX

ALIAS = "model-gateway"
PORT = 8080
BASE_URL = f"http://{ALIAS}:{PORT}"
MOUNT = "/gw"
READY_TIMEOUT_S = 60.0


NO_NETWORK = "none"


def relay_image(client: Any) -> str:
    from harness.sandbox.images.build import base_recipe, ensure_image

    return ensure_image(base_recipe(), client=client).image_id


@dataclass
class GatewayLink:
    """The internal network and relay of one instance; :meth:`close` undoes both."""

    client: Any
    network: str
    relay_id: str
    sandbox_id: str
    owns_network: bool = True  # False: the sandbox's own network, joined (left to its owner)

    @classmethod
    def open(cls, sandbox: Sandbox, socket_dir: Path, socket_name: str) -> GatewayLink:
        spec = sandbox.spec
        client = sandbox.client
        api = client.api
        try:
            image = relay_image(client)
        except Exception as exc:
            raise InfraError(f"model gateway relay image unavailable: {exc}",
                             "model_gateway_failed") from exc
        joined = spec.network != NO_NETWORK
        if joined:  # the instance's internal network (its owner made it: no route out)
            network = spec.network
        else:
            network = create_internal_network(spec.run_id, spec.instance_id, spec.worker,
                                              spec.run_root, client=client)
        link = cls(client, network, "", sandbox.id, owns_network=not joined)
        try:
            name = L.resource_name("harness-gw", spec.run_id, spec.instance_id)
            host_config = api.create_host_config(
                network_mode=network, auto_remove=True, read_only=True, cap_drop=["ALL"],
                security_opt=["no-new-privileges"], pids_limit=64, mem_limit="128m",
                binds={str(socket_dir): {"bind": MOUNT, "mode": "rw"}}, init=True)
            labels = L.run_labels(spec.run_id, spec.instance_id, spec.worker, spec.run_root)
            ttl = int(spec.ttl_s or 0) or 7 * 3600
            created = api.create_container(
                image, ["python3", "-c", TCP_TO_UNIX, f"{MOUNT}/{socket_name}", str(PORT),
                        str(ttl)],
                name=name, labels={**labels, L.TTL: str(ttl)}, host_config=host_config,
                user="0",
                networking_config=api.create_networking_config(
                    {network: api.create_endpoint_config(aliases=[ALIAS])}))
            link.relay_id = created["Id"]
            api.start(link.relay_id)
            _wait_ready(api, link.relay_id)
            if not joined:
                with contextlib.suppress(APIError):
                    api.disconnect_container_from_network(sandbox.id, NO_NETWORK)
                api.connect_container_to_network(sandbox.id, network)
        except InfraError:
            link.close()
            raise
        except (APIError, NotFound) as exc:
            link.close()
            raise InfraError(f"model gateway network setup failed: {exc}",
                             "model_gateway_failed") from exc
        return link

    def close(self) -> None:
        api = self.client.api
        if self.owns_network:
            with contextlib.suppress(APIError, NotFound):
                api.disconnect_container_from_network(self.sandbox_id, self.network,
                                                      force=True)
        if self.relay_id:
            with contextlib.suppress(APIError, NotFound):
                api.remove_container(self.relay_id, force=True)
        if not self.owns_network:
            return
        for _ in range(50):
            try:
                remove_network(self.network, client=self.client)
                return
            except Exception:
                time.sleep(0.2)  # the relay's endpoint goes away with its container
        remove_network(self.network, client=self.client)


def _wait_ready(api: Any, container_id: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        logs = api.logs(container_id, stdout=True, stderr=True)
        if b"relay ready" in logs:
            return
        state = api.inspect_container(container_id)["State"]
        if not state.get("Running"):
            raise InfraError(f"model gateway relay exited: {logs[-300:]!r}",
                             "model_gateway_failed")
        time.sleep(0.1)
    raise InfraError("model gateway relay did not start", "model_gateway_failed")

