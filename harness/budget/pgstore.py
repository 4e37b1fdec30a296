"""The campaign in PostgreSQL (``--campaign-url``): one campaign, many runners.

One row per campaign in the table ``harness_campaign`` (made on first use):

* ``name`` (the URL's ``?campaign=NAME``) and ``state``, the :class:`CampaignState`
  document the file would hold, as ``jsonb``;
* ``ceiling_usd``, ``spent_usd``, ``outstanding_usd``, ``available_usd``: read-only columns
  generated from it, for operators (``SELECT name, spent_usd FROM harness_campaign``).

Every change (an admission, a reservation, a settlement, a reading) is one transaction at
``SERIALIZABLE``. Before it begins, the session takes the campaign's advisory lock
(``pg_advisory_lock``, one per campaign name): concurrent writers of one campaign queue
there instead of failing each other, and the transaction's snapshot is taken once the lock
is held, so it reads the latest state. A serialization failure or deadlock (a writer that
bypassed the lock) is retried until ``lock_timeout_sec``; waiting longer than that for the
lock is a :class:`CampaignPersistenceError`, like the file's lock timeout. A connection lost
before anything was sent is reopened once; lost later (the outcome is unknown) it is a
persistence error, never a silent retry. A crashed process's lock goes with its session.

Connections are kept per thread and per URL (psycopg2, imported on first use). A forked
child opens its own: it never uses, nor closes, the parent's (psycopg2 does not end a
connection from a process other than the one that opened it, so the parent's session
lives on). Error texts never hold the password.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

from pydantic import ValidationError

from harness.core.errors import RefusalError

from . import errors as E
from .errors import refuse
from .models import CampaignState
from .pgurl import CampaignUrl, parse

T = TypeVar("T")

TABLE = "harness_campaign"
LOCK_SPACE = 0x68617263  # "harc": first key of the campaigns' advisory locks
SETUP_KEY = 0  # with LOCK_SPACE: the lock under which the table is made
RETRY = frozenset({"40001", "40P01"})  # serialization_failure, deadlock_detected
LOCK_NOT_AVAILABLE = "55P03"
UNDEFINED_TABLE = "42P01"

CREATE = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    name text PRIMARY KEY,
    state jsonb NOT NULL,
    ceiling_usd double precision
        GENERATED ALWAYS AS ((state ->> 'ceiling_usd')::double precision) STORED,
    spent_usd double precision
        GENERATED ALWAYS AS ((state ->> 'spent_usd')::double precision) STORED,
    outstanding_usd double precision
        GENERATED ALWAYS AS ((state ->> 'outstanding_usd')::double precision) STORED,
    available_usd double precision
        GENERATED ALWAYS AS ((state ->> 'available_usd')::double precision) STORED,
    updated_at timestamptz NOT NULL DEFAULT now()
)"""
SELECT = f"SELECT state::text FROM {TABLE} WHERE name = %s"
UPSERT = (
    f"INSERT INTO {TABLE} (name, state) VALUES (%s, %s::jsonb) ON CONFLICT (name) "
    "DO UPDATE SET state = EXCLUDED.state, updated_at = now()"
)
LOCK = "SELECT pg_advisory_lock(%s, hashtext(%s))"
UNLOCK = "SELECT pg_advisory_unlock(%s, hashtext(%s))"


def psycopg2_module() -> ModuleType:
    try:
        import psycopg2
        import psycopg2.extensions
    except ImportError as exc:
        raise refuse(
            E.CAMPAIGN_URL_UNUSABLE,
            "a --campaign-url campaign needs psycopg2: "
            "pip install psycopg2-binary (or the harness dev extra)",
        ) from exc
    return psycopg2


class _Conn:
    """One open connection of this thread, with what was set up on it."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.pid = os.getpid()
        self.table_ready = False
        self.timeout_ms: int | None = None


_LOCAL = threading.local()


class _Retry(Exception):
    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


class PostgresCampaignStore:
    """Handle on one campaign of a PostgreSQL database; cheap, safe to share across
    threads (each uses its own connection)."""

    kind = "postgresql"
    noun = "campaign"
    fresh_hint = "a new campaign name (?campaign=NAME)"

    def __init__(
        self,
        url: str | CampaignUrl,
        *,
        lock_timeout_sec: float = 30.0,
        connect_timeout_sec: float = 10.0,
    ) -> None:
        if not isinstance(url, CampaignUrl):
            try:
                url = parse(url)
            except ValueError as exc:
                raise refuse(E.CAMPAIGN_URL_UNUSABLE, str(exc)) from None
        self.url = url
        self.lock_timeout_sec = lock_timeout_sec
        self.connect_timeout_sec = connect_timeout_sec

    @property
    def location(self) -> str:
        return self.url.redacted

    @property
    def cli_arg(self) -> str:
        return self.url.cli_arg

    # -------------------------------------------------------------- the API

    def read(self) -> CampaignState | None:
        pg = psycopg2_module()
        for attempt in (1, 2):
            conn, reused = self._connection()
            try:
                with conn.raw.cursor() as cur:
                    cur.execute(SELECT, (self.url.name,))
                    row = cur.fetchone()
            except pg.Error as exc:
                if exc.pgcode == UNDEFINED_TABLE:
                    return None
                self._drop(conn)
                if attempt == 1 and reused and exc.pgcode is None:
                    continue  # an idle connection the server closed: a read is safe to repeat
                raise self._failure("could not read it", exc) from None
            return None if row is None else self._parse(row[0])
        raise AssertionError("unreachable")

    def transact(
        self, change: Callable[[CampaignState | None], tuple[T, CampaignState | None]]
    ) -> T:
        deadline = time.monotonic() + self.lock_timeout_sec
        attempt = 0
        while True:
            attempt += 1
            try:
                return self._once(change)
            except _Retry as retry:
                if time.monotonic() >= deadline:
                    raise self._failure("gave up retrying", retry.cause) from None
                time.sleep(random.uniform(0, min(0.05, 0.001 * 2 ** min(attempt, 6))))

    def put(self, state: CampaignState, *, replace: bool) -> None:
        """Store ``state`` as this campaign (``harness campaign migrate``): refused when the
        campaign exists, unless ``replace`` (and then only when no run holds custody)."""

        def change(current: CampaignState | None) -> tuple[None, CampaignState]:
            if current is not None and not replace:
                raise refuse(
                    E.CAMPAIGN_EXISTS,
                    f"{self.location} already holds campaign {self.url.name!r}: pass "
                    "--replace to overwrite it, or choose another ?campaign=NAME",
                )
            if current is not None and current.active_runs:
                held = ", ".join(sorted(current.active_runs))
                raise refuse(
                    E.CAMPAIGN_IN_USE,
                    f"campaign {self.location} holds custody of run(s) {held}: "
                    "finish or reconcile them before replacing it",
                )
            return None, state

        self.transact(change)

    # ----------------------------------------------------------- transaction

    def _once(self, change: Callable[[CampaignState | None], tuple[T, CampaignState | None]]) -> T:
        pg = psycopg2_module()
        conn, reused = self._connection()
        locked = False
        sent = False  # anything of this transaction reached the server
        cur = conn.raw.cursor()
        try:
            self._prepare(conn, cur)
            cur.execute(LOCK, (LOCK_SPACE, self.url.name))
            locked = True
            sent = True
            # Three round trips: the lock; BEGIN and the read; the write, COMMIT and unlock
            # (a failed write or commit skips the rest: the unlock is then left to finally).
            cur.execute(f"BEGIN ISOLATION LEVEL SERIALIZABLE; {SELECT}", (self.url.name,))
            row = cur.fetchone()
            state = None if row is None else self._parse(row[0])
            result, new = change(state)
            unlock = (LOCK_SPACE, self.url.name)
            if new is None:
                cur.execute(f"COMMIT; {UNLOCK}", unlock)
            else:
                data = new.model_dump_json(by_alias=True)
                cur.execute(f"{UPSERT}; COMMIT; {UNLOCK}", (self.url.name, data, *unlock))
            locked = False
            return result
        except pg.Error as exc:
            self._rollback(conn, cur)
            if exc.pgcode in RETRY:
                raise _Retry(exc) from None
            if exc.pgcode == LOCK_NOT_AVAILABLE:
                raise E.CampaignPersistenceError(
                    f"could not lock campaign {self.location} within {self.lock_timeout_sec:g}s"
                ) from None
            if exc.pgcode is None:  # the connection failed
                self._drop(conn)
                if reused and not sent:
                    raise _Retry(exc) from None
            raise self._failure("could not save it" if sent else "could not lock it", exc) from None
        except BaseException:
            self._rollback(conn, cur)
            raise
        finally:
            if locked:
                self._unlock(conn, cur)
            if not conn.raw.closed:
                cur.close()

    def _prepare(self, conn: _Conn, cur: Any) -> None:
        wanted = max(1, round(self.lock_timeout_sec * 1000))
        if conn.timeout_ms != wanted:
            cur.execute("SET lock_timeout = %s", (f"{wanted}ms",))
            conn.timeout_ms = wanted
        if conn.table_ready:
            return
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", (TABLE,))
        row = cur.fetchone()
        if not (row and row[0]):  # made once, by whichever process comes first
            cur.execute("BEGIN")
            cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_SPACE, SETUP_KEY))
            cur.execute(CREATE)
            cur.execute("COMMIT")
        conn.table_ready = True

    def _rollback(self, conn: _Conn, cur: Any) -> None:
        if conn.raw.closed:
            return
        pg = psycopg2_module()
        try:
            cur.execute("ROLLBACK")  # outside a transaction: a warning only
        except pg.Error:
            self._drop(conn)

    def _unlock(self, conn: _Conn, cur: Any) -> None:
        if conn.raw.closed:
            return  # the server released it with the session
        pg = psycopg2_module()
        try:
            cur.execute(UNLOCK, (LOCK_SPACE, self.url.name))
        except pg.Error:
            self._drop(conn)  # closing the session releases the lock

    def _parse(self, text: str) -> CampaignState:
        try:
            return CampaignState.model_validate_json(text)
        except (ValueError, ValidationError) as exc:
            raise E.CampaignPersistenceError(
                f"campaign {self.location} is not a campaign state: {exc}"
            ) from None

    def _failure(self, what: str, exc: Exception) -> E.CampaignPersistenceError:
        detail = self.url.scrub(" ".join(str(exc).split())) or type(exc).__name__
        return E.CampaignPersistenceError(f"campaign {self.location}: {what}: {detail}")

    # ----------------------------------------------------------- connections

    def _connection(self) -> tuple[_Conn, bool]:
        """This thread's connection to the URL, and whether it was open already."""
        cache: dict[str, _Conn] = _LOCAL.__dict__.setdefault("conns", {})
        conn = cache.get(self.url.dsn)
        if conn is not None and conn.pid == os.getpid() and not conn.raw.closed:
            return conn, True
        pg = psycopg2_module()
        extra: dict[str, Any] = {}
        if "connect_timeout=" not in self.url.dsn:
            extra["connect_timeout"] = max(1, round(self.connect_timeout_sec))
        if "application_name=" not in self.url.dsn:
            extra["application_name"] = "harness-campaign"
        try:
            raw = pg.connect(self.url.dsn, **extra)
            raw.autocommit = True
        except pg.Error as exc:
            raise self._failure("cannot connect", exc) from None
        conn = cache[self.url.dsn] = _Conn(raw)
        return conn, False

    def _drop(self, conn: _Conn) -> None:
        cache: dict[str, _Conn] = _LOCAL.__dict__.setdefault("conns", {})
        if cache.get(self.url.dsn) is conn:
            del cache[self.url.dsn]
        if not conn.raw.closed:
            with contextlib.suppress(Exception):  # a broken connection: nothing more to do
                conn.raw.close()


def unreachable(exc: E.CampaignPersistenceError) -> RefusalError:
    """The refusal of a run whose campaign database does not answer at admission."""
    return refuse(
        E.CAMPAIGN_UNREACHABLE,
        f"{exc}; check the URL, that the server runs, and the password "
        "(PGPASSWORD, ~/.pgpass or a service file)",
    )
