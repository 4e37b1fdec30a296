"""Test hosts for remote Docker engines: a network namespace per host, made and removed here.

A test helper (not a test module: ``__test__ = False``). A :class:`TestHost` is what a remote
engine host is to the harness, on this machine:

* its own network namespace ``hth-<hex>`` with one end of a veth pair (``<addr>/30``, the
  other end in the host's namespace), so the engine is reached at an address of its own
  and traffic stays on the test's own addresses (``10.213.0.0/16``, one /30 per host);
* ``dockerd`` inside it (``nsenter --net``: its own network, the host's mount namespace,
  ``--bridge none``, which is harmless in a namespace of its own), with its own data root,
  exec root, pid file, unix socket and storage driver (``engine_driver``), as
  :mod:`tests.sandbox.engines.engines_support` starts a second engine; optionally pinned to
  some CPUs (``taskset``: the engine's ``/info`` ``NCPU`` then reads that count, a real
  limit read from the engine);
* ``tls=True``: a ``tcp://<addr>:2376`` listener with ``--tlsverify`` and certificates made
  here (a CA, a server certificate for the address, a client certificate): a client
  without the client certificate is refused by the engine;
* ``ssh=True``: Debian's ``sshd`` listening on ``<addr>:22`` in the namespace (its own host
  key, config, pid file; key authentication only, for a key made here); its sessions get
  ``DOCKER_HOST`` of this host's engine (``SetEnv``), so ``ssh://root@<addr>`` reaches it
  the way Docker's ssh transport does (``ssh ... docker system dial-stdio``).

ssh reads the user's ``~/.ssh`` from the password database, not ``$HOME``: a test gives
the harness an ``ssh`` of its own on ``PATH`` (:func:`ssh_environment`: a two-line wrapper
running ``/usr/bin/ssh -F <config>``) whose config names the key, a known_hosts file with
the hosts' keys (``StrictHostKeyChecking yes``) and ``BatchMode``: what a user's
``~/.ssh/config`` holds for a real remote engine.

Everything is undone by :meth:`TestHost.close` (also after a failed start): processes
killed, namespace and veth deleted, folder removed; :func:`leftovers` lists what of a host
would remain (asserted empty by the tests' fixtures). A host whose
test process was killed before it could close it (its folder's ``owner`` names a pid and
start time that no longer run) is removed by the next :func:`start_host`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import docker

from tests.sandbox.engines.engines_support import Engine, dockerd_argv, stop_engine

__test__ = False  # a helper module whose name starts with test_

NET_PREFIX = (10, 213)  # 10.213.0.0/16: one /30 per test host
TLS_PORT = 2376
START_TIMEOUT_S = 60
ALLOC_LOCK = Path(tempfile.gettempdir()) / "harness-test-hosts.lock"
REAL_SSH = "/usr/bin/ssh"


def _run(*argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=timeout)


def _addresses_in_use() -> set[str]:
    out = _run("ip", "-4", "-o", "addr", "show").stdout
    return {
        tok.split("/")[0]
        for line in out.splitlines()
        for tok in line.split()
        if tok.count(".") == 3 and "/" in tok
    }


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, check=True, timeout=60)


def make_certificates(folder: Path, address: str) -> tuple[Path, Path]:
    """A CA, a server certificate for ``address`` and a client certificate (EC P-256, one
    day). Returns (server folder, client folder); each holds Docker's ``ca.pem``,
    ``cert.pem``, ``key.pem``."""
    folder.mkdir(parents=True, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(
        "req",
        "-x509",
        *ec,
        "-keyout",
        "ca-key.pem",
        "-out",
        "ca.pem",
        "-days",
        "1",
        "-subj",
        "/CN=harness test CA",
        cwd=folder,
    )
    for who, ext in (
        ("server", f"subjectAltName=IP:{address}\nextendedKeyUsage=serverAuth\n"),
        ("client", "extendedKeyUsage=clientAuth\n"),
    ):
        (folder / f"{who}.ext").write_text(ext)
        _openssl(
            "req",
            *ec,
            "-keyout",
            f"{who}-key.pem",
            "-out",
            f"{who}.csr",
            "-subj",
            f"/CN=harness test {who}",
            cwd=folder,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{who}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca-key.pem",
            "-CAcreateserial",
            "-out",
            f"{who}-cert.pem",
            "-days",
            "1",
            "-extfile",
            f"{who}.ext",
            cwd=folder,
        )
    out = []
    for who in ("server", "client"):
        dest = folder / who
        dest.mkdir()
        shutil.copy(folder / "ca.pem", dest / "ca.pem")
        shutil.copy(folder / f"{who}-cert.pem", dest / "cert.pem")
        shutil.copy(folder / f"{who}-key.pem", dest / "key.pem")
        out.append(dest)
    return out[0], out[1]


@dataclass
class TestHost:
    """One test host (see the module docstring). Made by :func:`start_host`."""

    __test__ = False

    name: str  # the namespace's name; the veths are <name-without-dash>h / n
    root: Path
    address: str  # the host's address (in its namespace)
    peer: str  # this machine's end of the veth
    ssh: bool = False
    tls: bool = False
    cpus: str | None = None
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _undo: list[tuple[str, list[str]]] = field(default_factory=list)

    # ---------------------------------------------------------------- names and URLs

    @property
    def veth(self) -> str:
        return self.name.replace("-", "") + "h"

    @property
    def veth_inside(self) -> str:
        return self.name.replace("-", "") + "n"

    @property
    def socket(self) -> Path:
        return self.root / "docker.sock"

    @property
    def unix_url(self) -> str:
        return f"unix://{self.socket}"

    @property
    def tls_url(self) -> str:
        return f"tcp://{self.address}:{TLS_PORT}"

    @property
    def ssh_url(self) -> str:
        return f"ssh://root@{self.address}"

    @property
    def client_certs(self) -> Path:
        """The client's certificate folder (``ca.pem``, ``cert.pem``, ``key.pem``)."""
        return self.root / "tls" / "client"

    @property
    def dockerd_pid(self) -> int:
        return self.procs["dockerd"].pid

    def client(self) -> docker.DockerClient:
        """A client of this engine over its unix socket (the test's own view)."""
        return docker.DockerClient(base_url=self.unix_url, timeout=60)

    def in_namespace(self, *argv: str) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{self.name}", *argv]

    # ---------------------------------------------------------------- faults

    def restore(self) -> None:
        """Bring back a host cut off (this machine's end of its veth set down)."""
        _run("ip", "link", "set", self.veth, "up")

    # ---------------------------------------------------------------- start and stop

    def _start_network(self) -> None:
        _run("ip", "netns", "add", self.name)
        self._undo.append(("netns", ["ip", "netns", "del", self.name]))
        _run("ip", "link", "add", self.veth, "type", "veth", "peer", "name", self.veth_inside)
        self._undo.append(("veth", ["ip", "link", "del", self.veth]))
        _run("ip", "link", "set", self.veth_inside, "netns", self.name)
        _run("ip", "addr", "add", f"{self.peer}/30", "dev", self.veth)
        _run("ip", "link", "set", self.veth, "up")
        ns = ["ip", "netns", "exec", self.name]
        _run(*ns, "ip", "addr", "add", f"{self.address}/30", "dev", self.veth_inside)
        _run(*ns, "ip", "link", "set", self.veth_inside, "up")
        _run(*ns, "ip", "link", "set", "lo", "up")

    def _spawn(self, key: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.root / f"{key}.log", "wb")  # noqa: SIM115 (closed with the process)
        try:
            proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        finally:
            log.close()
        self.procs[key] = proc
        return proc

    def _wait_ready(self, key: str, ready: Callable[[], bool], what: str) -> None:
        """Until ``ready()``; RuntimeError with the log's end if the process ``key`` exits,
        or after :data:`START_TIMEOUT_S`."""
        proc = self.procs[key]
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"test host {key} exited {proc.returncode}: "
                    f"{(self.root / f'{key}.log').read_text()[-2000:]}"
                )
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"test host {key} did not {what} within {START_TIMEOUT_S} s")

    def _answers(self) -> bool:
        if not self.socket.exists():
            return False
        with contextlib.suppress(docker.errors.DockerException):
            client = self.client()
            try:
                return bool(client.ping())
            finally:
                client.close()
        return False

    def _start_dockerd(self) -> None:
        argv = dockerd_argv(self.root, self.unix_url)
        if self.tls:
            server, _ = make_certificates(self.root / "tls", self.address)
            argv += [
                "-H",
                self.tls_url,
                "--tlsverify",
                "--tlscacert",
                str(server / "ca.pem"),
                "--tlscert",
                str(server / "cert.pem"),
                "--tlskey",
                str(server / "key.pem"),
            ]
        if self.cpus is not None:
            argv = ["taskset", "-c", self.cpus, *argv]
        self._spawn("dockerd", self.in_namespace(*argv))
        self._wait_ready("dockerd", self._answers, "answer")

    def _start_sshd(self) -> None:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
        key = self.root / "ssh_host_ed25519_key"
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key))
        user_key = self.root / "id_ed25519"
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(user_key))
        (self.root / "authorized_keys").write_text((self.root / "id_ed25519.pub").read_text())
        config = self.root / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    f"ListenAddress {self.address}:22",
                    f"HostKey {key}",
                    f"PidFile {self.root / 'sshd.pid'}",
                    f"AuthorizedKeysFile {self.root / 'authorized_keys'}",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "PermitRootLogin prohibit-password",
                    "StrictModes no",
                    "AllowUsers root",
                    "MaxStartups 100:30:200",
                    "MaxSessions 100",
                    "LogLevel ERROR",
                    f"SetEnv DOCKER_HOST={self.unix_url}",
                    "Subsystem sftp internal-sftp",
                    "",
                ]
            )
        )
        self._spawn("sshd", self.in_namespace("/usr/sbin/sshd", "-D", "-e", "-f", str(config)))
        host_pub = (self.root / "ssh_host_ed25519_key.pub").read_text().split()
        (self.root / "known_hosts").write_text(f"{self.address} {host_pub[0]} {host_pub[1]}\n")
        argv = [REAL_SSH, "-F", str(self.ssh_config()), self.address, "true"]

        def key_accepted() -> bool:
            done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
            return done.returncode == 0

        self._wait_ready("sshd", key_accepted, "let the test key in")

    def ssh_config_block(self) -> str:
        return "\n".join(
            [
                f"Host {self.address}",
                "  User root",
                f"  IdentityFile {self.root / 'id_ed25519'}",
                "  IdentitiesOnly yes",
                f"  UserKnownHostsFile {self.root / 'known_hosts'}",
                "  StrictHostKeyChecking yes",
                "  BatchMode yes",
                "  ConnectTimeout 10",
                "  ServerAliveInterval 5",
                "  ServerAliveCountMax 2",
                "  LogLevel ERROR",
                "",
            ]
        )

    def ssh_config(self) -> Path:
        path = self.root / "ssh_config"
        if not path.exists():
            path.write_text(self.ssh_config_block())
        return path

    def close(self) -> None:
        """Undo everything (safe after a partial start); :func:`leftovers` is then empty."""
        sshd = self.procs.pop("sshd", None)
        if sshd is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(sshd.pid, signal.SIGKILL)  # sshd and its sessions (a new session)
            sshd.wait(timeout=10)
        for pid in _pids_naming(self.root):  # ssh sessions' children (dial-stdio)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        dockerd = self.procs.pop("dockerd", None)
        if dockerd is not None:  # the second engine's own stop: daemon, shims, mounts, folder
            stop_engine(Engine(self.unix_url, self.root, dockerd.pid), dockerd)
        for _, argv in reversed(self._undo):
            _run(*argv, check=False)
        self._undo.clear()
        if self.root.exists() and dockerd is None:
            shutil.rmtree(self.root, ignore_errors=True)


def _pids_naming(root: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(root).encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def leftovers(host: TestHost) -> list[str]:
    """What of ``host`` is still there: namespace, veth, processes (dockerd, containerd,
    sshd and sessions: their argv names the host's folder)."""
    left = []
    if host.name in _run("ip", "netns", "list").stdout.split():
        left.append(f"netns {host.name}")
    if _run("ip", "link", "show", host.veth, check=False).returncode == 0:
        left.append(f"veth {host.veth}")
    for pid in _pids_naming(host.root):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state in ("Z", "X"):
            continue  # killed, its exit not yet reaped: it holds nothing of the host
        if not argv.startswith(b"rm\0"):  # the detached removal of its folder goes on alone
            left.append(f"pid {pid}: {argv[:80]!r}")
    for key in ("dockerd", "sshd"):
        proc = host.procs.get(key)
        if proc is not None and proc.poll() is None:
            left.append(f"{key} pid {proc.pid}")
    return left


def _allocate() -> tuple[str, str, str]:
    """A free /30 of 10.213.0.0/16: (namespace name, host address, this machine's end)."""
    used = _addresses_in_use()
    rng = random.Random(secrets.randbits(64))
    for _ in range(200):
        n = rng.randrange(1, 1 << 14)
        base = n * 4
        peer = f"{NET_PREFIX[0]}.{NET_PREFIX[1]}.{base >> 8}.{(base & 255) + 1}"
        address = f"{NET_PREFIX[0]}.{NET_PREFIX[1]}.{base >> 8}.{(base & 255) + 2}"
        if peer not in used:
            return f"hth-{secrets.token_hex(3)}", address, peer
    raise RuntimeError("no free /30 in 10.213.0.0/16")


def _start_time(pid: int) -> str | None:
    """A process's start time (``/proc/<pid>/stat`` field 22): with the pid, its identity."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def sweep_dead_hosts() -> list[str]:
    """Remove the test hosts whose test process is gone (killed before its fixture could
    close them): their processes, mounts, namespace, veth and folder."""
    swept = []
    for owner in Path(tempfile.gettempdir()).glob("hth-*/owner"):
        try:
            pid, start = owner.read_text().split()
        except (OSError, ValueError):
            continue
        if _start_time(int(pid)) == start:
            continue  # its test process still runs
        root = owner.parent
        name = "-".join(root.name.split("-")[:2])
        for proc in _pids_naming(root):
            if proc != os.getpid():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc, signal.SIGKILL)
        for sub in ("data", "exec"):
            _run("umount", "-R", "-l", str(root / sub), check=False)
        _run("ip", "netns", "del", name, check=False)
        _run("ip", "link", "del", name.replace("-", "") + "h", check=False)
        shutil.rmtree(root, ignore_errors=True)
        swept.append(name)
    return swept


def start_host(*, ssh: bool = False, tls: bool = False, cpus: str | None = None) -> TestHost:
    """Start a test host (undone on a failed start). Hosts left by a test process that was
    killed are removed first."""
    ALLOC_LOCK.touch(exist_ok=True)
    with open(ALLOC_LOCK) as lock:  # two test processes never pick one /30
        fcntl.flock(lock, fcntl.LOCK_EX)
        sweep_dead_hosts()
        name, address, peer = _allocate()
        root = Path(tempfile.mkdtemp(prefix=f"{name}-", dir="/tmp"))
        (root / "owner").write_text(f"{os.getpid()} {_start_time(os.getpid())}\n")
        host = TestHost(
            name=name, root=root, address=address, peer=peer, ssh=ssh, tls=tls, cpus=cpus
        )
        try:
            host._start_network()
        except BaseException:
            host.close()
            raise
    try:
        host._start_dockerd()
        if ssh:
            host._start_sshd()
    except BaseException:
        host.close()
        raise
    return host


def ssh_environment(folder: Path, hosts: list[TestHost]) -> dict[str, str]:
    """``PATH`` with an ``ssh`` that reads a config naming the hosts' key and host keys
    (what a user's ``~/.ssh/config`` would say); for a run's environment."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "ssh_config"
    config.write_text("".join(h.ssh_config_block() for h in hosts if h.ssh))
    wrapper = folder / "ssh"
    wrapper.write_text(f'#!/bin/sh\nexec {REAL_SSH} -F {config} "$@"\n')
    wrapper.chmod(0o755)
    return {"PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"}


__all__ = [
    "TestHost",
    "leftovers",
    "make_certificates",
    "ssh_environment",
    "start_host",
    "sweep_dead_hosts",
]
