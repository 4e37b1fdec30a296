"""``ssh://`` engines through one ssh tunnel each.

``ssh://[user@]host[:port][/path/to/docker.sock]`` names an engine reached over ssh, as
Docker spells it. Docker's own ssh transports start one ``ssh ... docker system
dial-stdio`` per connection (docker-py's ``use_ssh_client`` even per request: its pool
takes the pipe for a dropped socket, 0.65 s a ping here) or need paramiko. The harness
instead keeps **one** ssh connection per engine for the run:

* the remote engine's socket: the URL's path, else what the remote ``docker`` CLI uses
  (``docker context inspect`` run over ssh: the remote user's ``DOCKER_HOST`` or
  context), which must be a unix socket;
* ``ssh -N -L <local socket>:<remote socket>`` (``ExitOnForwardFailure``, a keep-alive
  every 10 s, 6 missed ones end it, no multiplexing master of the user's), the local socket
  in a short private folder (``/tmp/harness-ssh-*``, mode 0700);
* every client of the run, and the ``docker`` and official tools' subprocesses, use
  ``unix://<local socket>`` (:func:`harness.sandbox.engines.engine_environment`).

ssh itself reads the user's configuration (``~/.ssh/config``: keys, known hosts, jump
hosts); ``BatchMode`` is on: a host key not known or a key that needs a passphrase fails
at admission instead of prompting. The tunnel is a child of the process that opened it
and ends with it (``setpriv --pdeathsig``), so a killed controller leaves no ssh behind;
its folder (the socket file, ssh's log) names the opener (pid, start time, pid namespace)
and is removed by the next :meth:`SshTunnel.open` once that process is gone.
The remote side needs ``sshd`` allowing stream-local forwarding (OpenSSH's default) and,
without a path in the URL, the ``docker`` CLI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import docker
from docker.errors import DockerException

from harness.sandbox.lease_identity import pid_namespace, process_alive, process_start

CONNECT_TIMEOUT_S = 15
START_TIMEOUT_S = 60
PING_TRIES = 5  # pings through a connected tunnel before the engine counts as down
PREFIX = "harness-ssh-"
OWNER = "owner"  # in a tunnel's folder: "<pid> <start> <pid namespace>" of its opener
KEEPALIVE = ("-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=6")


class TunnelError(RuntimeError):
    """The tunnel to an ``ssh://`` engine could not be opened (the message says why)."""


@dataclass(frozen=True)
class SshTarget:
    host: str
    user: str | None = None
    port: int | None = None
    remote_socket: str | None = None  # from the URL's path


def parse_ssh_url(url: str) -> SshTarget:
    """The parts of ``ssh://[user@]host[:port][/socket]``; ValueError names what is wrong."""
    parts = urlsplit(url)
    if parts.scheme != "ssh" or not parts.hostname:
        raise ValueError(f"not an ssh:// engine URL: {url}")
    if parts.password is not None:  # named without it: the message reaches the manifest
        shown = url.replace(f":{parts.password}@", ":***@", 1)
        raise ValueError(f"{shown}: no password in an ssh:// URL (use a key)")
    if parts.query or parts.fragment:
        raise ValueError(f"{url}: an ssh:// URL has no query or fragment")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{url}: bad port") from exc
    path = parts.path if parts.path not in ("", "/") else None
    return SshTarget(host=parts.hostname, user=parts.username, port=port, remote_socket=path)


def ssh_argv(target: SshTarget, *options: str) -> list[str]:
    argv = [
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={CONNECT_TIMEOUT_S}",
        "-o",
        "ControlMaster=no",
        "-o",
        "ControlPath=none",
        *options,
    ]
    if target.user:
        argv += ["-l", target.user]
    if target.port:
        argv += ["-p", str(target.port)]
    return argv


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no message"


def remote_socket(target: SshTarget) -> str:
    """The remote engine's unix socket path (the URL's, else the remote CLI's)."""
    if target.remote_socket:
        return target.remote_socket
    try:
        done = subprocess.run(
            [*ssh_argv(target, "-T"), "--", target.host, "docker context inspect"],
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TunnelError(f"ssh {target.host}: {type(exc).__name__}: {exc}") from exc
    if done.returncode != 0:
        raise TunnelError(
            f"ssh {target.host} `docker context inspect` failed "
            f"({done.returncode}): {_last_line(done.stderr)}"
        )
    try:
        host = str(json.loads(done.stdout)[0]["Endpoints"]["docker"]["Host"])
    except (ValueError, LookupError, TypeError) as exc:
        raise TunnelError(
            f"ssh {target.host}: unreadable `docker context inspect` output: {done.stdout[:200]!r}"
        ) from exc
    if not host.startswith("unix://"):
        raise TunnelError(
            f"ssh {target.host}: its docker CLI talks to {host}, not a unix "
            "socket: name the socket in the URL (ssh://host/path/docker.sock)"
        )
    return host.removeprefix("unix://")


def _owner_line() -> str:
    pid = os.getpid()
    return f"{pid} {process_start(pid)} {pid_namespace()}\n"


def sweep_dead_tunnels() -> list[Path]:
    """Remove the folders of tunnels whose opener is gone (killed: its ssh ended with it,
    the folder stayed). A folder of another pid namespace, or without an owner, is left."""
    removed = []
    for owner in Path(tempfile.gettempdir()).glob(f"{PREFIX}*/{OWNER}"):
        try:
            pid, start, pidns = owner.read_text().split()
        except (OSError, ValueError):
            continue
        if pidns != pid_namespace() or process_alive(int(pid), start):
            continue
        shutil.rmtree(owner.parent, ignore_errors=True)
        removed.append(owner.parent)
    return removed


@dataclass
class SshTunnel:
    """One ``ssh -N -L`` to an engine's socket; :meth:`open` it, :meth:`close` it."""

    url: str
    folder: Path
    remote: str
    proc: subprocess.Popen[bytes]
    _closed: bool = field(default=False, repr=False)

    @property
    def socket(self) -> Path:
        return self.folder / "docker.sock"

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    @classmethod
    def open(cls, url: str, timeout_s: float = START_TIMEOUT_S) -> SshTunnel:
        """Open the tunnel and return once the engine answers a ping through it."""
        target = parse_ssh_url(url)
        remote = remote_socket(target)
        sweep_dead_tunnels()
        folder = Path(tempfile.mkdtemp(prefix=PREFIX))
        (folder / OWNER).write_text(_owner_line())
        sock = folder / "docker.sock"
        argv = [
            *ssh_argv(
                target,
                "-N",
                "-T",
                "-o",
                "ExitOnForwardFailure=yes",
                "-o",
                "StreamLocalBindUnlink=yes",
                *KEEPALIVE,
            ),
            "-L",
            f"{sock}:{remote}",
            "--",
            target.host,
        ]
        setpriv = shutil.which("setpriv")
        if setpriv:  # the tunnel ends with the process that opened it
            argv = [setpriv, "--pdeathsig", "TERM", "--", *argv]
        log = open(folder / "ssh.log", "wb")  # noqa: SIM115 (closed once handed over)
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        except OSError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            raise TunnelError(f"ssh {target.host}: {exc}") from exc
        finally:
            log.close()
        tunnel = cls(url=url, folder=folder, remote=remote, proc=proc)
        deadline = time.monotonic() + timeout_s
        last, tries = "no answer", 0
        while time.monotonic() < deadline and tries < PING_TRIES:
            if proc.poll() is not None:
                why = _last_line((folder / "ssh.log").read_text(errors="replace"))
                tunnel.close()
                raise TunnelError(f"ssh tunnel to {target.host} ended ({proc.returncode}): {why}")
            if sock.exists():  # ssh is connected and forwards: the engine must answer now
                tries += 1
                try:
                    client = docker.DockerClient(base_url=tunnel.endpoint, timeout=10)
                    try:
                        if client.ping():
                            return tunnel
                    finally:
                        client.close()
                except DockerException as exc:
                    last = f"{type(exc).__name__}: {exc}"[:300]
            time.sleep(0.2)
        tunnel.close()
        raise TunnelError(
            f"ssh tunnel to {target.host}: the engine at {remote} does not "
            f"answer through it ({last})"
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        shutil.rmtree(self.folder, ignore_errors=True)


class TunnelClient(docker.DockerClient):
    """A client of an ``ssh://`` engine through a tunnel of its own, closed with it."""

    def __init__(self, tunnel: SshTunnel, timeout: int) -> None:
        super().__init__(base_url=tunnel.endpoint, timeout=timeout)
        self.tunnel = tunnel
        weakref.finalize(self, tunnel.close)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.tunnel.close()


def tunnel_client(url: str, timeout: int = 120) -> TunnelClient:
    tunnel = SshTunnel.open(url)
    try:
        return TunnelClient(tunnel, timeout)
    except BaseException:
        tunnel.close()
        raise


__all__ = [
    "SshTarget",
    "SshTunnel",
    "TunnelClient",
    "TunnelError",
    "parse_ssh_url",
    "remote_socket",
    "sweep_dead_tunnels",
    "tunnel_client",
]
