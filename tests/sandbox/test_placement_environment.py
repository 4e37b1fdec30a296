"""A placed instance reaches its engine through what it is handed, never through a rewritten
``os.environ`` (issue 42): :func:`placement.placed` only makes the slot active; the client
(:func:`get_client`) and a subprocess's ``env`` (:func:`placement.instance_environment`)
point at the slot's engine. The engines are fake: loopback HTTP servers answering the two
requests a new client makes (``/version``, ``/_ping``). No Docker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from harness.sandbox import placement
from harness.sandbox.client import get_client
from harness.sandbox.engines import EngineRecord


class FakeEngine:
    """A loopback HTTP server that answers like a Docker engine's version and ping."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        seen = self.paths

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(self.path)
                ping = self.path.endswith("/_ping")
                body = b"OK" if ping else json.dumps(
                    {"ApiVersion": "1.41", "Version": "fake", "ID": "fake"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain" if ping else "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"tcp://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def engines(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeEngine, FakeEngine]]:
    """``(controller, placed)``: the process's ``DOCKER_HOST`` names the first."""
    controller, other = FakeEngine(), FakeEngine()
    monkeypatch.setenv("DOCKER_HOST", controller.url)
    for key in ("DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_CONTEXT"):
        monkeypatch.delenv(key, raising=False)
    try:
        yield controller, other
    finally:
        controller.close()
        other.close()


def slot_on(url: str, tmp_path: Path, **extra: Any) -> placement.Slot:
    return placement.Slot(EngineRecord(url=url, capacity=1, index=1, **extra), tmp_path, -1)


def child_docker_host(env: dict[str, str]) -> str:
    return subprocess.run([sys.executable, "-c", "import os; print(os.environ['DOCKER_HOST'])"],
                          env=env, capture_output=True, text=True, check=True).stdout.strip()


def test_placed_leaves_os_environ_alone_and_hands_out_the_slots_engine(
    tmp_path: Path, engines: tuple[FakeEngine, FakeEngine]
) -> None:
    controller, engine = engines
    before = dict(os.environ)
    with placement.placed(slot_on(engine.url, tmp_path)) as slot:
        assert dict(os.environ) == before  # (a) nothing rewritten while the instance runs
        assert placement.active() is slot
        client = get_client(timeout=10)  # (b) the client talks to the slot's engine
        try:
            assert client.api.base_url == engine.url.replace("tcp://", "http://")
        finally:
            client.close()
        assert any(p.endswith("/_ping") for p in engine.paths)
        assert not controller.paths
        env = placement.instance_environment()  # (b) and so does a subprocess given it
        assert env["DOCKER_HOST"] == engine.url
        assert child_docker_host(env) == engine.url
        assert child_docker_host(dict(os.environ)) == controller.url  # not inherited
        assert placement.controller_environment()["DOCKER_HOST"] == controller.url
        extra = placement.instance_environment({"PATH": "/bin"})
        assert extra == {"PATH": "/bin", "DOCKER_HOST": engine.url}
        assert dict(os.environ) == before
    assert dict(os.environ) == before
    assert placement.active() is None
    assert placement.instance_environment() == before
    client = get_client(timeout=10)  # no slot: the process's environment (the controller)
    client.close()
    assert any(p.endswith("/_ping") for p in controller.paths)


def test_a_tls_engines_certificates_and_an_ssh_engines_tunnel_go_in_the_environment(
    tmp_path: Path, engines: tuple[FakeEngine, FakeEngine]
) -> None:
    before = dict(os.environ)
    certs = str(tmp_path / "certs")
    with placement.placed(slot_on("tcp://build-2:2376", tmp_path, cert_path=certs)):
        env = placement.instance_environment()
        assert (env["DOCKER_HOST"], env["DOCKER_TLS_VERIFY"], env["DOCKER_CERT_PATH"]) == (
            "tcp://build-2:2376", "1", certs)
    via = f"unix://{tmp_path}/tunnel.sock"
    with placement.placed(slot_on("ssh://runner@build-1", tmp_path, via=via)):
        assert placement.instance_environment()["DOCKER_HOST"] == via
        from harness.agents.host_isolation import masked_paths

        assert f"{tmp_path}/tunnel.sock" in masked_paths()  # the agent cannot reach it either
    assert dict(os.environ) == before


def test_the_official_cli_and_its_sweep_get_the_placed_engine(
    tmp_path: Path, engines: tuple[FakeEngine, FakeEngine], monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmarks.programbench import official_eval

    _, engine = engines
    probe = "import os; print(os.environ['DOCKER_HOST'], os.environ['PROGRAMBENCH_BLOB_DIR'])"
    monkeypatch.setattr(official_eval, "programbench_cli", lambda: [sys.executable, "-c", probe])
    swept: list[dict[str, str] | None] = []

    def sweep(docker: str, label: str, env: dict[str, str] | None = None) -> int:
        swept.append(env)
        return 0

    monkeypatch.setattr(official_eval, "sweep", sweep)
    before = dict(os.environ)
    with placement.placed(slot_on(engine.url, tmp_path)):
        run = official_eval._run_cli(["eval"], blob_dir=tmp_path / "blobs",
                                     stdout_path=tmp_path / "out.txt",
                                     stderr_path=tmp_path / "err.txt", timeout_s=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [engine.url, str(tmp_path / "blobs")]
    assert len(swept) == 1 and swept[0] is not None
    assert swept[0]["DOCKER_HOST"] == engine.url
    assert dict(os.environ) == before
