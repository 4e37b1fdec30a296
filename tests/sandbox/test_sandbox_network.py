"""Point 6: no network by default; internal networks reach sidecars and nothing else."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import docker
import pytest

from harness.runner.sandbox_fixtures import SandboxFactory
from harness.sandbox import labels as L
from harness.sandbox.container import Sandbox

pytestmark = pytest.mark.docker

CONNECT = r"""
import socket, sys, time
from concurrent.futures import ThreadPoolExecutor
def attempt(target):
    host, port = target.rsplit(":", 1)
    t = time.monotonic()
    try:
        socket.create_connection((host, int(port)), timeout=8).close()
        return f"connected 0 {time.monotonic() - t:.2f}"
    except OSError as exc:
        return f"refused {exc.errno} {time.monotonic() - t:.2f}"
with ThreadPoolExecutor(8) as pool:
    for line in pool.map(attempt, sys.argv[1:]):
        print(line)
"""


def _connect_all(sb: Sandbox, *targets: tuple[str, int]) -> list[list[str]]:
    argv = ["python3", "-c", CONNECT, *(f"{h}:{p}" for h, p in targets)]
    res = sb.exec(argv, timeout=60)
    return [line.split() for line in res.stdout.decode().splitlines()]


def _connect(sb: Sandbox, host: str, port: int) -> list[str]:
    return _connect_all(sb, (host, port))[0]


def test_no_network_means_loopback_only_and_instant_failure(sandbox: Sandbox) -> None:
    links = sandbox.exec(["ip", "-o", "link"]).stdout.decode().splitlines()
    assert [line.split(":")[1].strip() for line in links] == ["lo"]
    assert sandbox.exec(["ip", "route"]).stdout.strip() == b""
    verdict, errno, seconds = _connect(sandbox, "1.1.1.1", 443)
    assert verdict == "refused" and int(errno) == 101 and float(seconds) < 0.5  # ENETUNREACH
    # Control: loopback itself works.
    sandbox.exec("python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 & sleep 0.8")
    assert _connect(sandbox, "127.0.0.1", 8000)[0] == "connected"


def _host_ip() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("1.1.1.1", 53))  # UDP connect: picks the source address, sends nothing
        return str(probe.getsockname()[0])


@pytest.fixture
def host_listener() -> Iterator[int]:
    """A TCP server on the host, on all addresses: what a sandbox must not reach."""
    server = socket.create_server(("0.0.0.0", 0))
    yield server.getsockname()[1]
    server.close()


def test_internal_network_reaches_the_sidecar_and_nothing_else(
    docker_client: docker.DockerClient,
    sandbox_factory: SandboxFactory,
    sandbox_image: str,
    harness_instance,
    host_listener: int,
) -> None:
    net = sandbox_factory.network()
    info = docker_client.api.inspect_network(net)
    assert info["Internal"] is True
    assert info["Labels"][L.RUN] == harness_instance.run_id
    assert info["Labels"][L.INSTANCE] == harness_instance.instance_id
    sidecar = sandbox_factory(sandbox_image, network=net, user="agent")
    agent = sandbox_factory(sandbox_image, network=net, user="agent")
    sidecar.exec("cd /tmp && python3 -m http.server 8080 >/dev/null 2>&1 & sleep 1")
    assert _connect(agent, sidecar.name, 8080)[0] == "connected"
    # Nothing outside answers: not the internet, not the host on the network's gateway
    # address nor on its main address (both would reach host_listener otherwise).
    gateway = info["IPAM"]["Config"][0]["Gateway"]
    targets = [("1.1.1.1", 443), (gateway, host_listener), (_host_ip(), host_listener)]
    for target, (verdict, errno, _) in zip(targets, _connect_all(agent, *targets), strict=True):
        assert verdict == "refused" and int(errno) in (101, 113), (target, errno)  # unreachable
    dns = agent.exec(
        ["python3", "-c", "import socket; socket.getaddrinfo('deb.debian.org', 80)"], timeout=30
    )
    assert dns.exit_code != 0 and b"gaierror" in dns.stderr
