"""A per-instance PostgreSQL 15 sidecar, seeded from the checkout's ``db/init.sql.gz``.

Start: the ``pg15`` image runs ``sleep <ttl>`` as its main process; the cluster's ``pg_ctl``
starts it, ``pg_isready`` (in the same exec, then a loop with a deadline if it does not answer
yet) proves readiness, the dump is copied in and loaded with
``gunzip | psql -v ON_ERROR_STOP=1`` as ``eigent``, then, in the session that creates the agent
role (as the cluster's superuser, below), the upstream foreign-key fix recreates
``email.sent_log -> email.messages`` with ``ON DELETE CASCADE`` (a no-op when the constraint
does not exist). Any failure is ``InfraError(reason_code="pg_fail")``.

Two roles. ``eigent`` (superuser, the password ``camel`` is hard-coded upstream in every
preprocess and checker) owns the task schemas; it is for the harness's steps only. The agent
gets ``cowork_agent``: no superuser, no role or database creation, no DDL, only data access
(``SELECT, INSERT, UPDATE, DELETE, TRUNCATE`` on every table and ``USAGE, SELECT, UPDATE`` on
every sequence of the task schemas), with a random per-sidecar password. While an agent runs
(:meth:`PgSidecar.enter_agent_phase` .. :meth:`PgSidecar.leave_agent_phase`) ``eigent`` cannot
log in (``NOLOGIN``, its sessions ended), so the publicly known password is of no use to the
agent; the checker logs in as ``eigent`` again after the agent container is gone. So
``COPY ... TO PROGRAM``, ``ALTER ROLE ... SUPERUSER`` and trojan triggers are refused to the
agent. Administrative SQL runs as the cluster's ``postgres`` user over the local socket
(peer authentication), its text on stdin.

Two image layouts (:func:`pg_layout`, from the image's configuration):

* ``harness``: the harness's ``pg15`` image (Debian ``postgresql-15``, cluster ``15 main``
  initialised at build time with the roles), started with its ``pg_ctl``, seeded as above.
* ``official``: an image with the official ``postgres`` image's contract (entrypoint
  ``docker-entrypoint.sh``, ``PGDATA`` set), e.g. ``postgres:15`` itself, as upstream's
  ``docker-compose.yml`` uses it. The dump goes to ``/docker-entrypoint-initdb.d/`` next to a
  first script that adds the administrative ``postgres`` role, and the image's own entrypoint
  runs as the ``postgres`` user with ``POSTGRES_USER=eigent``, ``POSTGRES_PASSWORD=camel``,
  ``POSTGRES_DB=cowork_gym``: it initialises the empty data directory, runs the scripts (the
  dump through ``gunzip | psql``) on a socket-only server, then starts the real one; readiness
  on ``127.0.0.1`` therefore means seeded. A dead entrypoint fails at once with its log's
  tail. The foreign-key fix and the agent role follow as in the other layout.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal

from benchmarks.cowork_bench.containers import Limits, RunIdentity, container_spec
from benchmarks.cowork_bench.images import ensure_image
from harness.api import (
    ExecResult,
    InfraError,
    NewDir,
    Sandbox,
    join_tars,
    pack_bytes,
    pack_dirs,
    pack_tree,
)

PG_USER = "eigent"
PG_PASSWORD = "camel"  # hard-coded upstream in every preprocess and checker
PG_DATABASE = "cowork_gym"
PG_PORT = 5432
AGENT_ROLE = "cowork_agent"
PgLayout = Literal["harness", "official"]
INITDB_DIR = "/docker-entrypoint-initdb.d"  # the official image's init scripts
ADMIN_SCRIPT = "0000-harness-admin.sql"  # sorts before the dump
ADMIN_ROLE_SQL = "CREATE ROLE postgres LOGIN SUPERUSER;\n"  # admin_sql's role (local socket)
ENTRYPOINT_PID = "/tmp/harness-pg.pid"
ENTRYPOINT_LOG = "/tmp/harness-pg.log"
# 0: ready on 127.0.0.1 (initialised and seeded); 1: still starting; 3: the entrypoint died.
OFFICIAL_READY = (
    f"pg_isready -q -h 127.0.0.1 -p {PG_PORT} && exit 0; "
    f'kill -0 "$(cat {ENTRYPOINT_PID} 2>/dev/null)" 2>/dev/null && exit 1; exit 3'
)

# The harness layout's start and a first readiness check in one exec; NOT_READY_YET:
# started, not answering yet. The cluster's own ``pg_ctl`` on its configuration folder (which
# names the data folder), waiting for the server as ``pg_ctl -w`` does (about 0.2 s here):
# ``pg_ctlcluster`` starts the same way but then polls the port in half-second sleeps, which
# cost about 2 s of every sidecar. pg_ctl waits at most 60 s (its default, and what
# pg_ctlcluster gives it), well inside the exec's 120 s. A failed start prints its log's
# tail, then what pg_ctl said (a configuration error is only there). The paths are the
# layout's: Debian's, which pg_ctlcluster reads too.
NOT_READY_YET = 75
PG_CTL = "/usr/lib/postgresql/15/bin/pg_ctl"
PG_CONF_DIR = "/etc/postgresql/15/main"
PG_LOG = "/var/log/postgresql/postgresql-15-main.log"
START_HARNESS_LAYOUT = (
    f"out=$({PG_CTL} start -w -s -t 60 -D {PG_CONF_DIR} -l {PG_LOG} 2>&1) "
    f"|| {{ rc=$?; tail -n 20 {PG_LOG} >&2; printf '%s\\n' \"$out\" >&2; exit $rc; }}; "
    f"pg_isready -q -h 127.0.0.1 -p {PG_PORT} -U {PG_USER} -d {PG_DATABASE} || exit {NOT_READY_YET}"
)

CREATE_AGENT_ROLE_SQL = f"""
CREATE ROLE {AGENT_ROLE} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS
  NOINHERIT PASSWORD '%(password)s';
GRANT CONNECT, TEMPORARY ON DATABASE {PG_DATABASE} TO {AGENT_ROLE};
"""

# After preprocess (it may create tables): data access on every task schema, then eigent out.
ENTER_AGENT_SQL = f"""
DO $$
DECLARE s text;
BEGIN
  FOR s IN SELECT nspname FROM pg_namespace
           WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema' LOOP
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO {AGENT_ROLE}', s);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA %I '
                   'TO {AGENT_ROLE}', s);
    EXECUTE format('GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA %I TO {AGENT_ROLE}', s);
  END LOOP;
END
$$;
ALTER ROLE {PG_USER} NOLOGIN;
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
 WHERE usename = '{PG_USER}' AND pid <> pg_backend_pid();
"""

LEAVE_AGENT_SQL = f"""
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = '{AGENT_ROLE}';
ALTER ROLE {PG_USER} LOGIN;
"""

FK_FIX_SQL = """
DO $$
BEGIN
  IF EXISTS (
    SELECT 1 FROM pg_constraint
    WHERE conname = 'sent_log_message_id_fkey'
      AND conrelid = to_regclass('email.sent_log')
  ) THEN
    ALTER TABLE email.sent_log DROP CONSTRAINT sent_log_message_id_fkey;
    ALTER TABLE email.sent_log ADD CONSTRAINT sent_log_message_id_fkey
      FOREIGN KEY (message_id) REFERENCES email.messages(id) ON DELETE CASCADE;
  END IF;
END
$$;
"""


@dataclass
class PgSidecar:
    host: str  # the name other containers on the network use
    port: int
    container: Sandbox
    network: str
    timings: dict[str, float] = field(default_factory=dict)
    agent_password: str = field(default_factory=lambda: secrets.token_hex(16), repr=False)
    image_id: str | None = None  # the image it runs (None: not recorded)
    layout: PgLayout = "harness"
    seed_missing: str | None = None  # the dump that was not there (``allow_unseeded``)

    def _env(self, user: str, password: str) -> dict[str, str]:
        env = {
            "PGHOST": self.host,
            "PGPORT": str(self.port),
            "PGUSER": user,
            "PGPASSWORD": password,
            "PGDATABASE": PG_DATABASE,
            "PGTZ": "UTC",
        }
        env.update({f"PG_{k[2:]}": v for k, v in list(env.items()) if k != "PGTZ"})
        return env

    def client_env(self) -> dict[str, str]:
        """Environment for preprocess and checkers (upstream copies ``PG*`` to ``PG_*``)."""
        return self._env(PG_USER, PG_PASSWORD)

    def agent_env(self) -> dict[str, str]:
        """Environment of the agent container: the unprivileged ``cowork_agent`` role."""
        return self._env(AGENT_ROLE, self.agent_password)

    def admin_sql(self, sql: str, what: str, timeout_sec: float = 60) -> None:
        """Run ``sql`` as the cluster's superuser (local socket, text on stdin)."""
        res = self.container.exec(
            ["psql", "-d", PG_DATABASE, "-v", "ON_ERROR_STOP=1", "-q", "-X", "-o", "/dev/null"],
            user="postgres",
            stdin=sql.encode(),
            timeout=timeout_sec,
        )
        if res.exit_status != 0:
            raise _fail(self.container, what, res.stderr_text)

    def enter_agent_phase(self) -> None:
        """Grant the agent role its data access (after preprocess); lock ``eigent`` out."""
        self.admin_sql(ENTER_AGENT_SQL, "granting the agent role failed")

    def leave_agent_phase(self) -> None:
        """End the agent role's sessions; ``eigent`` may log in again (the checker)."""
        self.admin_sql(LEAVE_AGENT_SQL, "restoring the checker role failed")


def _fail(container: Sandbox, what: str, detail: str) -> InfraError:
    tail = detail.strip().splitlines()[-5:]
    return InfraError(f"postgres sidecar {container.name}: {what}: {' | '.join(tail)}", "pg_fail")


def _psql(container: Sandbox, args: list[str], timeout_sec: float) -> ExecResult:
    return container.exec(
        [
            "psql",
            "-h",
            "127.0.0.1",
            "-U",
            PG_USER,
            "-d",
            PG_DATABASE,
            "-v",
            "ON_ERROR_STOP=1",
            "-q",
            *args,
        ],
        env={"PGPASSWORD": PG_PASSWORD, "PGTZ": "UTC"},
        timeout=timeout_sec,
    )


def wait_ready(container: Sandbox, deadline_sec: float) -> float:
    """Poll ``pg_isready`` until it answers or the deadline passes (then ``pg_fail``)."""
    started = time.monotonic()
    last = ""
    while True:
        res = container.exec(
            ["pg_isready", "-h", "127.0.0.1", "-p", str(PG_PORT), "-U", PG_USER, "-d", PG_DATABASE],
            timeout=10,
        )
        if res.exit_status == 0:
            return time.monotonic() - started
        last = res.stdout_text + res.stderr_text
        if time.monotonic() - started > deadline_sec:
            raise _fail(container, f"not ready after {deadline_sec:.0f}s", last)
        time.sleep(0.2)


def seed(container: Sandbox, seed_path: Path, timeout_sec: float = 600) -> None:
    container.put_archive("/", join_tars([  # one copy: /seed (root's, 0755), then the dump
        pack_dirs([NewDir("/seed", mtime=time.time())]),
        pack_tree([(seed_path, "seed/init.sql.gz")], uid=0, gid=0),
    ]))  # fmt: skip
    res = container.exec(
        [
            "bash",
            "-o",
            "pipefail",
            "-c",
            f"gunzip -c /seed/init.sql.gz | psql -h 127.0.0.1 -U {PG_USER} -d {PG_DATABASE} "
            "-v ON_ERROR_STOP=1 -q >/dev/null",
        ],
        env={"PGPASSWORD": PG_PASSWORD, "PGTZ": "UTC"},
        timeout=timeout_sec,
    )
    if res.exit_status != 0:
        raise _fail(
            container, f"seeding {seed_path.name} failed (exit {res.exit_status})", res.stderr_text
        )


def pg_layout(image_id: str) -> PgLayout:
    """``official`` when the image follows the official ``postgres`` image's contract (its
    entrypoint is ``docker-entrypoint.sh`` and it sets ``PGDATA``), else ``harness``."""
    from docker.errors import DockerException

    from harness.api import SandboxError, get_client

    try:
        config = get_client().api.inspect_image(image_id).get("Config") or {}
    except (DockerException, SandboxError) as exc:
        raise InfraError(f"postgres image {image_id}: {exc}", "pg_fail") from exc
    return layout_of(config)


def layout_of(config: Mapping[str, object]) -> PgLayout:
    """The layout an image's ``Config`` (``docker image inspect``) says it has."""
    entry = config.get("Entrypoint") or []
    env = config.get("Env") or []
    entrypoint = isinstance(entry, list) and any(
        PurePosixPath(str(e)).name == "docker-entrypoint.sh" for e in entry)  # fmt: skip
    pgdata = isinstance(env, list) and any(str(e).startswith("PGDATA=") for e in env)
    return "official" if entrypoint and pgdata else "harness"


def start_harness_layout(
    container: Sandbox, seed_path: Path | None, ready_timeout_sec: float
) -> float:
    """Start (:data:`START_HARNESS_LAYOUT`), readiness, then the dump; the seconds the seed
    took."""
    res = container.exec(  # as the cluster's owner: no capability needed
        ["sh", "-c", START_HARNESS_LAYOUT], timeout=120, user="postgres"
    )
    if res.exit_status not in (0, NOT_READY_YET):
        raise _fail(container, "starting the cluster failed", res.stdout_text + res.stderr_text)
    if res.exit_status == NOT_READY_YET:  # started, not answering yet: poll
        wait_ready(container, ready_timeout_sec)
    t1 = time.monotonic()
    if seed_path is not None:
        seed(container, Path(seed_path))
    return time.monotonic() - t1


def start_official_layout(
    container: Sandbox,
    seed_path: Path | None,
    ready_timeout_sec: float,
    seed_timeout_sec: float = 600,
) -> float:
    """The image's own entrypoint initialises and seeds; the seconds until it was ready."""
    init = [pack_bytes(f"{INITDB_DIR}/{ADMIN_SCRIPT}", ADMIN_ROLE_SQL.encode(), mode=0o644,
                       uid=0, gid=0)]  # fmt: skip
    if seed_path is not None:
        init.append(pack_tree([(Path(seed_path), f"{INITDB_DIR.strip('/')}/init.sql.gz")],
                              uid=0, gid=0))  # fmt: skip
    container.put_archive("/", join_tars(init))  # one copy: the admin script, the dump
    env = {"POSTGRES_USER": PG_USER, "POSTGRES_PASSWORD": PG_PASSWORD,
           "POSTGRES_DB": PG_DATABASE, "TZ": "UTC", "PGTZ": "UTC"}  # fmt: skip
    launch = (f"echo $$ > {ENTRYPOINT_PID}; "
              f"exec docker-entrypoint.sh postgres > {ENTRYPOINT_LOG} 2>&1")  # fmt: skip
    try:
        exec_id = container.api.exec_create(container.id, ["sh", "-c", launch], user="postgres",
                                            environment=env, workdir="/")  # fmt: skip
        container.api.exec_start(exec_id["Id"], detach=True)
    except Exception as exc:  # the engine failed, not the database
        raise _fail(container, "starting docker-entrypoint.sh failed", str(exc)) from exc
    t0 = time.monotonic()
    deadline = ready_timeout_sec + (seed_timeout_sec if seed_path is not None else 0)
    while True:
        res = container.exec(["sh", "-c", OFFICIAL_READY], user="postgres", timeout=30)
        if res.exit_status == 0:
            return time.monotonic() - t0
        if res.exit_status != 1 or time.monotonic() - t0 > deadline:
            log = container.exec(["tail", "-n", "20", ENTRYPOINT_LOG], user="postgres",
                                 timeout=30)  # fmt: skip
            what = ("docker-entrypoint.sh exited" if res.exit_status == 3
                    else f"not ready after {deadline:.0f}s")  # fmt: skip
            raise _fail(container, f"{what} (initialising and seeding)",
                        log.stdout_text + res.stderr_text)  # fmt: skip
        time.sleep(0.3)


def start_postgres(
    network: str,
    ident: RunIdentity,
    instance_id: str,
    seed_path: Path | None,
    *,
    ready_timeout_sec: float = 120,
    ttl_s: int = 7200,
    limits: Limits | None = None,
    image_id: str | None = None,
    allow_unseeded: bool = False,
) -> PgSidecar:
    """Start, wait for and seed a sidecar on ``network``; reachable there by its name.

    Labelled with the run and instance (role ``pg``). On failure the container is removed
    before ``InfraError(pg_fail)`` propagates. ``image_id`` (``--cowork-pg-image``) replaces
    the harness's pg15 image: either the harness's layout (cluster ``15 main``, role
    ``eigent``, database ``cowork_gym``) or the official image's (:func:`pg_layout`).
    A ``seed_path`` that does not exist (a checkout without ``db/``) is ``pg_fail`` before
    any container starts, unless ``allow_unseeded``: then the database is left empty and
    ``seed_missing`` names the dump.
    """
    missing: str | None = None
    if seed_path is not None and not Path(seed_path).is_file():
        if not allow_unseeded:
            raise InfraError(f"postgres sidecar: no database dump at {seed_path} (a checkout "
                             "without db/?): fetch the checkout's db/init.sql.gz",
                             "pg_fail")  # fmt: skip
        missing, seed_path = str(seed_path), None
    layout: PgLayout = "harness"
    if image_id is None:
        try:
            image_id = ensure_image("pg15").image_id
        except InfraError as exc:
            raise InfraError(f"postgres image: {exc}", "pg_fail") from exc
    else:
        layout = pg_layout(image_id)
    t0 = time.monotonic()
    try:
        container = Sandbox.create(container_spec(
            image_id, ident, instance_id, network=network, role="pg",
            env={"TZ": "UTC"}, ttl_s=ttl_s, limits=limits,
        ))  # fmt: skip
    except InfraError as exc:
        raise InfraError(f"postgres sidecar: {exc}", "pg_fail") from exc
    sidecar = PgSidecar(host=container.name, port=PG_PORT, container=container, network=network,
                        image_id=image_id, layout=layout, seed_missing=missing)  # fmt: skip
    try:
        if layout == "official":
            t1 = time.monotonic()
            sidecar.timings["start_s"] = t1 - t0
            start_official_layout(container, seed_path, ready_timeout_sec)
        else:
            seeded_s = start_harness_layout(container, seed_path, ready_timeout_sec)
            t1 = time.monotonic() - seeded_s
            sidecar.timings["start_s"] = t1 - t0
        sidecar.admin_sql(  # one session (one exec): the foreign-key fix, the agent role
            FK_FIX_SQL + CREATE_AGENT_ROLE_SQL % {"password": sidecar.agent_password},
            "the foreign-key fix or creating the agent role failed",
        )
        sidecar.timings["seed_s"] = time.monotonic() - t1
    except BaseException:
        container.remove()
        raise
    return sidecar
