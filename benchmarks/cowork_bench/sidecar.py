"""A per-instance PostgreSQL 15 sidecar, seeded from the checkout's ``db/init.sql.gz``.

Start: the ``pg15`` image runs ``sleep <ttl>`` as its main process; ``pg_ctlcluster`` starts
the cluster, a ``pg_isready`` loop with a deadline proves readiness, the dump is copied in and
loaded with ``gunzip | psql -v ON_ERROR_STOP=1`` as ``eigent``, then the upstream foreign-key
fix recreates ``email.sent_log -> email.messages`` with ``ON DELETE CASCADE`` (a no-op when the
constraint does not exist). Any failure is ``InfraError(reason_code="pg_fail")``.

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
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.cowork_bench.containers import Limits, RunIdentity, container_spec
from benchmarks.cowork_bench.images import ensure_image
from harness.core.errors import InfraError
from harness.sandbox import ExecResult, NewDir, Sandbox, pack_tree

PG_USER = "eigent"
PG_PASSWORD = "camel"  # hard-coded upstream in every preprocess and checker
PG_DATABASE = "cowork_gym"
PG_PORT = 5432
AGENT_ROLE = "cowork_agent"

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
    container.make_dirs([NewDir("/seed")])
    container.put_archive("/seed", pack_tree([(seed_path, "init.sql.gz")], uid=0, gid=0))
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


def fix_sent_log_fk(container: Sandbox) -> None:
    res = _psql(container, ["-c", FK_FIX_SQL], timeout_sec=60)
    if res.exit_status != 0:
        raise _fail(container, "foreign-key fix failed", res.stderr_text)


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
) -> PgSidecar:
    """Start, wait for and seed a sidecar on ``network``; reachable there by its name.

    Labelled with the run and instance (role ``pg``). On failure the container is removed
    before ``InfraError(pg_fail)`` propagates. ``image_id`` (``--cowork-pg-image``) replaces
    the harness's pg15 image and must follow its layout (cluster ``15 main``, role
    ``eigent``, database ``cowork_gym``).
    """
    if image_id is None:
        try:
            image_id = ensure_image("pg15").image_id
        except InfraError as exc:
            raise InfraError(f"postgres image: {exc}", "pg_fail") from exc
    t0 = time.monotonic()
    try:
        container = Sandbox.create(container_spec(
            image_id, ident, instance_id, network=network, role="pg",
            env={"TZ": "UTC"}, ttl_s=ttl_s, limits=limits,
        ))  # fmt: skip
    except InfraError as exc:
        raise InfraError(f"postgres sidecar: {exc}", "pg_fail") from exc
    sidecar = PgSidecar(host=container.name, port=PG_PORT, container=container, network=network,
                        image_id=image_id)  # fmt: skip
    try:
        res = container.exec(  # as the cluster's owner: no capability needed
            ["pg_ctlcluster", "15", "main", "start"], timeout=120, user="postgres"
        )
        if res.exit_status != 0:
            raise _fail(container, "pg_ctlcluster start failed", res.stdout_text + res.stderr_text)
        wait_ready(container, ready_timeout_sec)
        sidecar.timings["start_s"] = time.monotonic() - t0
        t1 = time.monotonic()
        if seed_path is not None:
            seed(container, Path(seed_path))
        fix_sent_log_fk(container)
        sidecar.admin_sql(
            CREATE_AGENT_ROLE_SQL % {"password": sidecar.agent_password},
            "creating the agent role failed",
        )
        sidecar.timings["seed_s"] = time.monotonic() - t1
    except BaseException:
        container.remove()
        raise
    return sidecar
