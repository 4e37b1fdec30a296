"""A real PostgreSQL server for the budget tests (issue 27, point 2).

:func:`start_server` runs Debian's server binaries (``initdb``, ``pg_ctl``; on ``PATH`` or
under ``/usr/lib/postgresql/<version>/bin``) on a cluster in a new folder under ``/tmp``,
listening on a Unix socket in that folder (trust: no password) and on a free loopback
port (``scram-sha-256``: the password of :data:`USER`). Run as root, the cluster belongs to
the ``postgres`` user (``initdb`` refuses root). :meth:`PgServer.stop` stops it and removes
the folder; a watchdog process does both if the test process dies first, so no server is
ever left running. A missing server fails loudly (:class:`PostgresMissing`): tests that need
PostgreSQL never skip.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

USER = "harness"
DATABASE = "harness"
INSTALL = "apt-get install postgresql (Debian's server: initdb and pg_ctl)"

# Stops the server and removes its folder once the test process ($1) is gone.
WATCHDOG = """
while kill -0 "$1" 2>/dev/null; do sleep 0.5; done
pid=$(head -n 1 "$2/postmaster.pid" 2>/dev/null) && kill -QUIT "$pid" 2>/dev/null
for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
rm -rf "$3"
"""


class PostgresMissing(RuntimeError):
    """No PostgreSQL server binaries here: the test fails (it never skips)."""


def server_binaries() -> Path:
    """The folder holding ``initdb`` and ``pg_ctl``."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if versions:
        return versions[-1].parent
    raise PostgresMissing(f"no PostgreSQL server (initdb, pg_ctl) on this machine: {INSTALL}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgServer:
    root: Path
    port: int
    password: str
    owner: tuple[int, int] | None  # (uid, gid) the cluster runs as, None: this user
    bindir: Path
    watchdog: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root

    def url(self, campaign: str, *, tcp: bool = False, password: bool = False) -> str:
        """A campaign URL: the Unix socket (trust), or loopback TCP (scram-sha-256), with
        the password in the URL when asked."""
        secret = f":{self.password}" if password else ""
        if tcp:
            return (
                f"postgresql://{USER}{secret}@127.0.0.1:{self.port}/{DATABASE}?campaign={campaign}"
            )
        return (
            f"postgresql://{USER}{secret}@/{DATABASE}?host={self.socket_dir}&port={self.port}"
            f"&campaign={campaign}"
        )

    def connect(self) -> Any:
        import psycopg2

        conn = psycopg2.connect(
            host=str(self.socket_dir), port=self.port, user=USER, dbname=DATABASE
        )
        conn.autocommit = True
        return conn

    def sql(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(query, params)
                return list(cur.fetchall()) if cur.description else []
        finally:
            conn.close()

    def _run(self, *args: str) -> None:
        kw: dict[str, Any] = {}
        if self.owner is not None:
            kw = {"user": self.owner[0], "group": self.owner[1], "extra_groups": []}
        done = subprocess.run(
            [str(self.bindir / args[0]), *args[1:]],
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            **kw,
        )
        if done.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stderr}\n{tail}")

    def stop(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        finally:
            if self.watchdog is not None:
                self.watchdog.kill()
                self.watchdog.wait()
            shutil.rmtree(self.root, ignore_errors=True)


def start_server() -> PgServer:
    bindir = server_binaries()
    owner = None
    if os.geteuid() == 0:
        try:
            entry = pwd.getpwnam("postgres")
        except KeyError:
            raise PostgresMissing(
                "initdb refuses to run as root and there is no 'postgres' user: " + INSTALL
            ) from None
        owner = (entry.pw_uid, entry.pw_gid)
    root = Path(tempfile.mkdtemp(prefix="harness-pg-", dir="/tmp"))
    password = "pw-" + secrets.token_hex(12)
    server = PgServer(root=root, port=_free_port(), password=password, owner=owner, bindir=bindir)
    try:
        server.watchdog = subprocess.Popen(
            ["sh", "-c", WATCHDOG, "pg-watchdog", str(os.getpid()), str(server.data), str(root)],
            start_new_session=True,
        )
        pwfile = root / "pwfile"
        pwfile.write_text(password + "\n")
        if owner is not None:
            os.chown(root, *owner)
            os.chown(pwfile, *owner)
        server._run(
            "initdb", "-D", str(server.data), "-U", USER, f"--pwfile={pwfile}", "-E", "UTF8",
            "--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync", "--no-instructions",
        )  # fmt: skip
        pwfile.unlink()
        options = (
            f"-c listen_addresses=127.0.0.1 -p {server.port} -k {root} "
            "-c max_connections=200 -c unix_socket_permissions=0777"
        )
        server._run(
            "pg_ctl", "-D", str(server.data), "-l", str(root / "server.log"), "-w", "-t", "60",
            "-o", options, "start",
        )  # fmt: skip
        conn = None
        for _ in range(50):  # the socket may lag the pid file by a moment
            try:
                import psycopg2

                conn = psycopg2.connect(
                    host=str(root), port=server.port, user=USER, dbname="postgres"
                )
                break
            except psycopg2.OperationalError:
                time.sleep(0.1)
        if conn is None:
            raise RuntimeError(f"PostgreSQL in {root} does not answer")
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {DATABASE}")
        conn.close()
    except BaseException:
        server.stop()
        raise
    return server


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL a process started with ``start_new_session`` and everything it started."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def serving() -> Iterator[PgServer]:
    """A PostgreSQL server for a fixture's scope (no server here: the test fails loudly):
    ``yield from serving()``."""
    server = start_server()
    try:
        yield server
    finally:
        server.stop()
