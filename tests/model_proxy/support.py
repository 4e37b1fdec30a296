"""What the model gateway's tests share: a client on a gateway's socket, and for the
record-and-replay runs (issue 28) the submission hash a row was scored on and a tripwire
server on a stopped model server's address (it counts any call that reaches it: a replay
must make none)."""

from __future__ import annotations

from typing import Any

import httpx

from harness.core.models import TaskRow
from harness.model_proxy.replay_check import submission_sha256
from harness.model_proxy.server import GatewayServer
from harness.testing.fake_model_server import FakeModelServer, start_fake_model_server


def sha(row: TaskRow) -> str:
    """The sha256 of the archive the row was scored on (as replay-check compares it)."""
    found = submission_sha256(row)
    assert found is not None, row.details.get("submission")
    return found


def tripwire(stopped: FakeModelServer, script: dict[str, Any]) -> FakeModelServer:
    """A new fake server on ``stopped``'s address, serving ``script``."""
    host, port = stopped.server.server_address[:2]
    return start_fake_model_server(script, host=str(host), port=int(port))


def client(gw: GatewayServer) -> httpx.Client:
    """A client of ``gw``'s Unix socket, with a placeholder key (the gateway replaces it)."""
    return httpx.Client(
        transport=httpx.HTTPTransport(uds=str(gw.socket_path)),
        base_url="http://model-gateway/v1",
        headers={"Authorization": "Bearer placeholder"},
    )
