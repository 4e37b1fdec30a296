"""``harness exec``: run a command in the current instance's sandbox as the agent user,
for agents that run on the host (``--agent host-command``).

The host-command agent serves one Unix socket per instance (:class:`ExecService`, in a
private 0700 directory; the path is ``$HARNESS_EXEC_SOCKET``). ``harness exec`` sends one
JSON request (argv, stdin, timeout, working directory) and gets the exit code and the
bounded output back, so the agent needs neither the Docker socket nor the container's
name: the service only ever runs commands in its own sandbox, as the agent user.

::

    harness exec -- ls -la                       # argv
    harness exec --timeout 60 'make && ./test'   # one argument: run with bash -lc
    echo data | harness exec -- cat              # stdin (when it is not a terminal)

Exit status: the command's; 124 on timeout; 2 on bad use; 75 when the service is gone.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import socket
import socketserver
import struct
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

if TYPE_CHECKING:  # harness exec (the CLI half) stays light
    from harness.sandbox.protocol import Sandbox

SOCKET_ENV = "HARNESS_EXEC_SOCKET"
MAX_REQUEST_BYTES = 32 << 20  # stdin included (base64)
DEFAULT_MAX_OUTPUT = 1 << 20  # per stream, returned to the caller
HARD_MAX_OUTPUT = 16 << 20
DEFAULT_TIMEOUT_S = 600.0
AGENT_USER = "agent"
EXIT_UNAVAILABLE = 75


class ExecRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    argv: list[str] = Field(min_length=1)
    stdin_b64: str | None = None
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0)
    workdir: str | None = None
    max_output: int = Field(default=DEFAULT_MAX_OUTPUT, gt=0, le=HARD_MAX_OUTPUT)


class ExecReply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    exit_code: int | None = None
    stdout_b64: str = ""
    stderr_b64: str = ""
    timed_out: bool = False
    truncated: bool = False
    error: str | None = None


def _cut(data: bytes, limit: int) -> tuple[bytes, bool]:
    return (data, False) if len(data) <= limit else (data[:limit], True)


class ExecService:
    """Serves ``harness exec`` requests for one sandbox on a private Unix socket."""

    def __init__(self, sandbox: Sandbox, *, max_timeout_s: float | None = None) -> None:
        self.sandbox = sandbox
        self.max_timeout_s = max_timeout_s
        self.calls = 0
        self.refused = 0  # connections from a process that is not this instance's agent
        # Whether a peer (by pid) may use this socket; None admits every process that can
        # open it (see harness.agents.host_isolation.PeerCheck)
        self.admit: Callable[[int], bool] | None = None
        self._calls_lock = threading.Lock()  # requests are served on concurrent threads
        self._dir = Path(tempfile.mkdtemp(prefix="hx-exec-"))
        os.chmod(self._dir, 0o700)
        self.path = self._dir / "exec.sock"
        service = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                admitted = service.admits(self.request)
                line = self.rfile.readline(MAX_REQUEST_BYTES + 1)  # read either way: no RST
                reply = service.answer(line) if admitted else ExecReply(
                    error="refused: this socket serves another instance's agent")
                self.wfile.write(reply.model_dump_json().encode() + b"\n")

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        self._server = Server(str(self.path), Handler)
        os.chmod(self.path, 0o600)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        name="harness-exec", daemon=True)

    def start(self) -> ExecService:
        self._thread.start()
        return self

    def admits(self, conn: socket.socket) -> bool:
        """Whether the connecting process (its pid from ``SO_PEERCRED``) may use the socket."""
        if self.admit is None:
            return True
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid = struct.unpack("3i", creds)[0]
        if self.admit(pid):
            return True
        with self._calls_lock:
            self.refused += 1
        return False

    def answer(self, line: bytes) -> ExecReply:
        if len(line) > MAX_REQUEST_BYTES:
            return ExecReply(error=f"request over {MAX_REQUEST_BYTES} bytes")
        try:
            req = ExecRequest.model_validate_json(line)
            stdin = base64.b64decode(req.stdin_b64, validate=True) if req.stdin_b64 else None
        except (ValidationError, ValueError) as exc:
            return ExecReply(error=f"bad request: {str(exc).splitlines()[0]}")
        timeout = req.timeout_s
        if self.max_timeout_s is not None:
            timeout = min(timeout, self.max_timeout_s)
        with self._calls_lock:
            self.calls += 1
        try:
            res = self.sandbox.exec(req.argv, user=AGENT_USER, timeout=timeout, stdin=stdin,
                                    workdir=req.workdir)
        except Exception as exc:  # the sandbox is gone or the engine failed
            return ExecReply(error=f"exec failed: {exc}")
        out, t1 = _cut(bytes(res.stdout), req.max_output)
        err, t2 = _cut(bytes(res.stderr), req.max_output)
        return ExecReply(exit_code=res.exit_code, timed_out=bool(res.timed_out),
                         truncated=t1 or t2 or res.truncated,
                         stdout_b64=base64.b64encode(out).decode(),
                         stderr_b64=base64.b64encode(err).decode())

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self.path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self._dir.rmdir()


def call(path: str, request: ExecRequest, timeout_s: float) -> ExecReply:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        sock.connect(path)
        sock.sendall(request.model_dump_json().encode() + b"\n")
        chunks = []
        while True:
            data = sock.recv(1 << 16)
            if not data:
                break
            chunks.append(data)
    return ExecReply.model_validate_json(b"".join(chunks))


def exec_command(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="harness exec",
        description="run a command in this instance's sandbox as the agent user")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        help="seconds before the command's process tree is killed")
    parser.add_argument("--workdir", default=None, help="working directory in the sandbox")
    parser.add_argument("--max-output", type=int, default=DEFAULT_MAX_OUTPUT,
                        help=f"bytes kept per stream (at most {HARD_MAX_OUTPUT})")
    parser.add_argument("--no-stdin", action="store_true", help="do not forward stdin")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="argv, or one string run with bash -lc")
    args = parser.parse_args(list(argv))
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        print("harness exec: no command given; e.g. harness exec -- ls -la", file=sys.stderr)
        return 2
    path = os.environ.get(SOCKET_ENV)
    if not path:
        print(f"harness exec: ${SOCKET_ENV} is not set: run it from a host-command agent",
              file=sys.stderr)
        return 2
    argv_ = ["bash", "-lc", cmd[0]] if len(cmd) == 1 else cmd
    stdin: bytes | None = None
    if not args.no_stdin and not sys.stdin.isatty():
        stdin = sys.stdin.buffer.read(MAX_REQUEST_BYTES // 2)
    try:
        req = ExecRequest(argv=argv_, timeout_s=args.timeout, workdir=args.workdir,
                          max_output=args.max_output,
                          stdin_b64=base64.b64encode(stdin).decode() if stdin else None)
    except ValidationError as exc:
        print(f"harness exec: {str(exc).splitlines()[-1].strip()}", file=sys.stderr)
        return 2
    try:
        reply = call(path, req, args.timeout + 120)
    except (OSError, ValueError) as exc:
        print(f"harness exec: the sandbox service at {path} is not available ({exc})",
              file=sys.stderr)
        return EXIT_UNAVAILABLE
    if reply.error:
        print(f"harness exec: {reply.error}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    sys.stdout.buffer.write(base64.b64decode(reply.stdout_b64))
    sys.stderr.buffer.write(base64.b64decode(reply.stderr_b64))
    sys.stdout.flush()
    if reply.truncated:
        print("harness exec: output truncated", file=sys.stderr)
    if reply.timed_out:
        return 124
    return reply.exit_code if reply.exit_code is not None else 1
