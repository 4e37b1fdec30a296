"""A per-instance PostgreSQL 15 sidecar, seeded from the checkout's ``db/init.sql.gz``.

Start: the ``pg15`` image runs ``sleep <ttl>`` as its main process; ``pg_ctlcluster`` starts
the cluster, a ``pg_isready`` loop with a deadline proves readiness, the dump is copied in and
loaded with ``gunzip | psql -v ON_ERROR_STOP=1`` as ``eigent``, then the upstream foreign-key
fix recreates ``email.sent_log -> email.messages`` with ``ON DELETE CASCADE`` (a no-op when the
constraint does not exist). Any failure is ``InfraError(reason_code="pg_fail")``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.cowork_bench import docker_ops
from benchmarks.cowork_bench.images import ensure_image
from harness.errors import InfraError
from harness.sandbox import Sandbox

PG_USER = "eigent"
PG_PASSWORD = "camel"  # hard-coded upstream in every preprocess and checker
PG_DATABASE = "cowork_gym"
PG_PORT = 5432

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

    def client_env(self) -> dict[str, str]:
        """Environment for preprocess and checkers (upstream copies ``PG*`` to ``PG_*``)."""
        env = {
            "PGHOST": self.host,
            "PGPORT": str(self.port),
            "PGUSER": PG_USER,
            "PGPASSWORD": PG_PASSWORD,
            "PGDATABASE": PG_DATABASE,
            "PGTZ": "UTC",
        }
        env.update({f"PG_{k[2:]}": v for k, v in list(env.items()) if k != "PGTZ"})
        return env


def _fail(container: Sandbox, what: str, detail: str) -> InfraError:
    tail = detail.strip().splitlines()[-5:]
    return InfraError(f"postgres sidecar {container.name}: {what}: {' | '.join(tail)}", "pg_fail")


def _psql(container: Sandbox, args: list[str], timeout_sec: float) -> docker_ops.ExecResult:
    return docker_ops.exec_in(
        container,
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
        timeout_sec=timeout_sec,
    )


def wait_ready(container: Sandbox, deadline_sec: float) -> float:
    """Poll ``pg_isready`` until it answers or the deadline passes (then ``pg_fail``)."""
    started = time.monotonic()
    last = ""
    while True:
        res = docker_ops.exec_in(
            container,
            ["pg_isready", "-h", "127.0.0.1", "-p", str(PG_PORT), "-U", PG_USER, "-d", PG_DATABASE],
            timeout_sec=10,
        )
        if res.exit_code == 0:
            return time.monotonic() - started
        last = res.stdout + res.stderr
        if time.monotonic() - started > deadline_sec:
            raise _fail(container, f"not ready after {deadline_sec:.0f}s", last)
        time.sleep(0.2)


def seed(container: Sandbox, seed_path: Path, timeout_sec: float = 600) -> None:
    data = docker_ops.tar_tree([(seed_path, "init.sql.gz")])
    docker_ops.exec_in(container, ["mkdir", "-p", "/seed"])
    docker_ops.put_archive(container, "/seed", data)
    res = docker_ops.exec_in(
        container,
        [
            "bash",
            "-o",
            "pipefail",
            "-c",
            f"gunzip -c /seed/init.sql.gz | psql -h 127.0.0.1 -U {PG_USER} -d {PG_DATABASE} "
            "-v ON_ERROR_STOP=1 -q >/dev/null",
        ],
        env={"PGPASSWORD": PG_PASSWORD, "PGTZ": "UTC"},
        timeout_sec=timeout_sec,
    )
    if res.exit_code != 0:
        raise _fail(
            container, f"seeding {seed_path.name} failed (exit {res.exit_code})", res.stderr
        )


def fix_sent_log_fk(container: Sandbox) -> None:
    res = _psql(container, ["-c", FK_FIX_SQL], timeout_sec=60)
    if res.exit_code != 0:
        raise _fail(container, "foreign-key fix failed", res.stderr)


def start_postgres(
    network: str,
    ident: docker_ops.RunIdentity,
    instance_id: str,
    seed_path: Path | None,
    *,
    ready_timeout_sec: float = 120,
    ttl_s: int = 7200,
) -> PgSidecar:
    """Start, wait for and seed a sidecar on ``network``; reachable there by its name.

    Labelled with the run and instance (role ``pg``). On failure the container is removed
    before ``InfraError(pg_fail)`` propagates.
    """
    try:
        image = ensure_image("pg15")
    except InfraError as exc:
        raise InfraError(f"postgres image: {exc}", "pg_fail") from exc
    t0 = time.monotonic()
    try:
        container = docker_ops.start(
            image.image_id, ident, instance_id, network=network, role="pg",
            env={"TZ": "UTC"}, ttl_s=ttl_s,
        )  # fmt: skip
    except InfraError as exc:
        raise InfraError(f"postgres sidecar: {exc}", "pg_fail") from exc
    sidecar = PgSidecar(host=container.name, port=PG_PORT, container=container, network=network)
    try:
        res = docker_ops.exec_in(
            container, ["pg_ctlcluster", "15", "main", "start"], timeout_sec=120
        )
        if res.exit_code != 0:
            raise _fail(container, "pg_ctlcluster start failed", res.stdout + res.stderr)
        wait_ready(container, ready_timeout_sec)
        sidecar.timings["start_s"] = time.monotonic() - t0
        t1 = time.monotonic()
        if seed_path is not None:
            seed(container, Path(seed_path))
        fix_sent_log_fk(container)
        sidecar.timings["seed_s"] = time.monotonic() - t1
    except BaseException:
        docker_ops.remove(container)
        raise
    return sidecar
