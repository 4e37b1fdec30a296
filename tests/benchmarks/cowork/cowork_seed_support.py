"""Helpers of the issue-26 tests (the seed in the container, mcp-call, the tool route): a
git checkout made from files, a scan of a folder for a value, the labelled leftovers of a
run, and an HTTP server on a Unix socket that echoes what reached it."""

from __future__ import annotations

import json
import os
import socket
import socketserver
import subprocess
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import docker

GIT = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(repo), *GIT, *args], check=True,
                         capture_output=True, text=True)  # fmt: skip
    return out.stdout.strip()


def make_repo(repo: Path, files: dict[str, str], *, executable: tuple[str, ...] = ()) -> str:
    """A git checkout holding ``files`` (one commit); its HEAD."""
    repo.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if name in executable:
            path.chmod(0o755)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "seed")
    return git(repo, "rev-parse", "HEAD")


def files_holding(root: Path, needle: bytes) -> list[str]:
    """Every regular file under ``root`` whose bytes contain ``needle``."""
    return [str(p) for p in root.rglob("*") if p.is_file() and not p.is_symlink()
            and needle in p.read_bytes()]  # fmt: skip


def labelled(run_id: str) -> list[str]:
    """Containers and networks still carrying the run's label."""
    client = docker.from_env()
    flt = {"label": f"harness.run={run_id}"}
    return [c.name for c in client.containers.list(all=True, filters=flt)] + [
        n.name for n in client.networks.list(filters=flt)]  # fmt: skip


class _Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _reply(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        data = json.dumps(
            {
                "method": self.command,
                "path": self.path,
                "body": body,
                "headers": {k.lower(): v for k, v in self.headers.items()},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = _reply


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self) -> tuple[socket.socket, tuple[str, int]]:
        conn, _ = self.socket.accept()
        return conn, ("unix", 0)  # BaseHTTPRequestHandler wants a (host, port) address


def echo_server(path: Path) -> _UnixServer:
    """An HTTP server on the Unix socket ``path`` answering every request with what it got
    (method, path, headers, body) as JSON; ``shutdown()`` when done."""
    server = _UnixServer(str(path), _Echo)
    os.chmod(path, 0o600)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
