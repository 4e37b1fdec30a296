"""The private attributes of docker-py, urllib3 and http.client the exec path relies on.

No public API hands out the hijacked exec socket or the bytes its HTTP reader buffered
past the headers, so ``harness/sandbox/exec_stream.py`` reaches ``sock._sock`` (docker-py's
SocketIO) and ``sock._response.raw._fp.fp`` (docker-py -> requests -> urllib3 ->
http.client). pyproject pins docker and urllib3 to their major version; these tests fail
loudly, on the real engine, if an upgrade moves either attribute (the code itself would
only degrade: an unsupported transport, or lost early output).
"""

from __future__ import annotations

import socket

import docker
import pytest
import urllib3

from harness.sandbox.container import Sandbox
from harness.sandbox.exec_stream import _raw_socket

pytestmark = pytest.mark.docker


def test_the_exec_socket_reaches_are_still_there(sandbox: Sandbox) -> None:
    api = sandbox.client.api
    exec_id = api.exec_create(sandbox.id, ["true"], stdout=True, stderr=True)["Id"]
    sock = api.exec_start(exec_id, socket=True)
    try:
        assert isinstance(sock._sock, socket.socket), (
            f"docker {docker.__version__}: the exec socket has no _sock")
        assert _raw_socket(sock) is sock._sock
        reader = sock._response.raw._fp.fp  # AttributeError: docker/urllib3 moved it
        assert callable(reader.peek), (
            f"urllib3 {urllib3.__version__}: the HTTP reader has no peek()")
    finally:
        sock.close()
