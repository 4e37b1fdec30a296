"""The two byte relays (:mod:`harness.sandbox.relay`) run as the relay containers run them
(``python3 -c SCRIPT ...``), here on the host, chained: a TCP client -> ``TCP_TO_UNIX`` -> a
Unix socket -> ``UNIX_TO_TCP`` -> a TCP echo server. Bytes arrive unchanged both ways, the
client's end of input reaches the server, and each relay ends by itself after its TTL."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from harness.sandbox.relay import TCP_TO_UNIX, UNIX_TO_TCP


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _echo_until_eof(server: socket.socket, seen: list[bytes]) -> None:
    conn, _ = server.accept()
    with conn:
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
        seen.append(data)
        conn.sendall(data[::-1])  # answered only after the client's end of input arrived


def _start(script: str, *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    assert proc.stdout is not None
    assert "ready" in proc.stdout.readline()
    return proc


def test_the_relays_carry_bytes_both_ways_pass_on_the_end_of_input_and_end_after_their_ttl(
    tmp_path: Path,
) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []
    echo = threading.Thread(target=_echo_until_eof, args=(server, seen), daemon=True)
    echo.start()
    sock = str(tmp_path / "route.sock")
    port = _free_port()
    inner = _start(UNIX_TO_TCP, sock, "127.0.0.1", str(server.getsockname()[1]), "2")
    outer = _start(TCP_TO_UNIX, sock, str(port), "2")
    try:
        payload = bytes(range(256)) * 1024  # 256 KiB: several reads on each side
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            client.sendall(payload)
            client.shutdown(socket.SHUT_WR)
            answer = b""
            while chunk := client.recv(65536):
                answer += chunk
        echo.join(10)
        assert seen == [payload]
        assert answer == payload[::-1]
        started = time.monotonic()
        assert outer.wait(10) == 0 and inner.wait(10) == 0  # their TTL (2 s) ended them
        assert time.monotonic() - started < 5
    finally:
        for proc in (outer, inner):
            proc.kill()
            proc.wait()
        server.close()
