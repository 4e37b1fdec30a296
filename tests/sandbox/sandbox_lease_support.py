"""Stand-ins for another host's run on the same Docker engine
(``tests.sandbox.sandbox_lease_support``)."""

from __future__ import annotations

import secrets
import uuid
from pathlib import Path

import docker

from harness.sandbox import labels as L
from harness.sandbox.images.build import BuiltImage
from harness.sandbox.lease import create_lease_volume
from harness.sandbox.lease_identity import Owner


def other_host() -> Owner:
    """A host that is not this one (another machine on the same engine)."""
    return Owner(host=f"other-{secrets.token_hex(6)}", hostname="elsewhere",
                 boot=str(uuid.uuid4()), pidns="pid:[4026531836]", pid=1, start="1")


def foreign_run(client: docker.DockerClient, image: BuiltImage, run_id: str, root: Path,
                owner: Owner, lease_ttl_s: float) -> list[str]:
    """Stand-in for another host's run: a sandbox, a network and a lease, all its labels."""
    labels = L.run_labels(run_id, "i1", "gw0", root, owner=owner.labels())
    box = client.containers.run(image.image_id, ["sleep", "600"], detach=True, auto_remove=True,
                                network_mode="none",
                                labels={**labels, L.TTL: "600"},
                                name=L.resource_name("harness", run_id, "i1"))
    net = L.resource_name("harness-net", run_id, "i1")
    client.api.create_network(net, driver="bridge", internal=True, labels=labels)
    lease = create_lease_volume(client.api, run_id, root, lease_id=secrets.token_hex(8),
                                ttl_s=lease_ttl_s, owner=owner.labels())
    return [str(box.name), net, lease]
