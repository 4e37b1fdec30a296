"""One campaign, many runners (issue 27, point 2): the campaign in a real PostgreSQL server.

Every test here needs the server (``pg_server``: initdb and pg_ctl, started for the test
process, stopped at its end) and fails loudly without it. The campaign's rules themselves
run on both stores in the other budget tests (``campaign_where``); these cover what only
the database has: runners on separate run roots sharing one ceiling, a killed runner
reconciled through the URL, ``harness campaign migrate``, the password kept out of every
record, the advisory lock's timeout, a failing save, an unreachable server and forks.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from harness.budget import BudgetRefused, BudgetSettings, Campaign, ControllerBudget
from harness.budget.models import CAMPAIGN_SCHEMA, ActiveRun
from harness.core.errors import RefusalError
from tests.budget.budget_support import BASELINE, FINGERPRINT
from tests.budget.pg_support import PgServer
from tests.support.suite import Run, Suite, finish, run_cli, wait_for

pytestmark = pytest.mark.postgres

EPS = 1e-9


def _name() -> str:
    return f"c-{uuid.uuid4().hex[:12]}"


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    full.update(env or {})
    return run_cli("campaign", *args, env=full)


def _row(pg_server: PgServer, name: str) -> dict[str, Any]:
    rows = pg_server.sql(
        "SELECT ceiling_usd, spent_usd, outstanding_usd, available_usd, state::text "
        "FROM harness_campaign WHERE name = %s",
        (name,),
    )
    assert len(rows) == 1, f"campaign {name} is not in the database"
    ceiling, spent, outstanding, available, state = rows[0]
    return {
        "ceiling": ceiling,
        "spent": spent,
        "outstanding": outstanding,
        "available": available,
        "state": json.loads(state),
    }


class CeilingWatch:
    """Reads the campaign's row every few milliseconds while runs go on and keeps the
    largest ``spent + outstanding`` it saw (every committed state must stay under the
    ceiling: admissions hold costs up to their reservation)."""

    def __init__(self, pg_server: PgServer, name: str) -> None:
        self.conn = pg_server.connect()
        self.name = name
        self.worst = 0.0
        self.reads = 0
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        with self.conn.cursor() as cur:
            while not self._halt.wait(0.005):
                cur.execute(
                    "SELECT spent_usd + outstanding_usd, ceiling_usd FROM "
                    "harness_campaign WHERE name = %s",
                    (self.name,),
                )
                row = cur.fetchone()
                if row is not None:
                    self.reads += 1
                    self.worst = max(self.worst, row[0])
                    self.ceiling = row[1]

    def __enter__(self) -> CeilingWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        self._thread.join()
        self.conn.close()


# --------------------------------------------------------------- two runners, one ceiling


@pytest.mark.docker  # reconcile proves on Docker that the killed run left no container
def test_two_runners_eight_workers_never_cross_the_ceiling_and_the_killed_one_is_reconciled(
    tmp_path: Path, pg_server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two pytest runs of the selftest benchmark (two runners: their own folders and run
    roots), four xdist workers each, reserve on one campaign in PostgreSQL over loopback TCP
    (password in PGPASSWORD). Runner B is SIGKILLed (controller and workers) with
    instances in flight; runner A runs on until the ceiling stops it. No committed state
    ever crossed the ceiling; a new run is refused while B's custody is stale; ``harness
    campaign reconcile URL --run B`` charges B's open reservations; the database's sums
    then match every run's charges."""
    name = _name()
    url = pg_server.url(name, tcp=True)
    env = {"PGPASSWORD": pg_server.password}
    ceiling = 40.0
    rng = random.Random(27)
    options = (
        "--campaign-url",
        url,
        "--campaign-budget-usd",
        str(ceiling),
        "--per-task-reserve-usd",
        "2.0",
        "--unknown-cost-allowance-usd",
        "2.0",
        "--no-report",
        "--harness-progress",
        "off",
        "-n",
        "4",
    )
    suites = {}
    for runner in ("a", "b"):
        (tmp_path / runner).mkdir()
        suites[runner] = Suite(tmp_path / runner)
    suites["a"].tasks(
        [
            {"id": f"a{i:03d}", "work": "sleep", "seconds": 0.05, "cost": rng.randint(8, 64) / 32}
            for i in range(120)
        ]
    )
    # B's instances hold their reservation ~0.6 s and cost little: it is still in flight,
    # not stopped by the ceiling, when A (fast instances, larger costs) runs beside it.
    suites["b"].tasks([{"id": "b", "work": "sleep", "seconds": 0.6, "cost": 0.05, "count": 300}])
    monkeypatch.setenv("PGPASSWORD", pg_server.password)  # the runs inherit it, never argv
    campaign = Campaign.open_or_create(
        url, ceiling_usd=ceiling, key_fingerprint="none", baseline_usage=0.0
    )

    def run_of(root: Path) -> ActiveRun | None:
        try:
            state = campaign.snapshot()
        except Exception:
            return None
        found = [r for r in state.active_runs.values() if Path(r.run_root) == root.absolute()]
        return found[0] if found else None

    def settled(root: Path, at_least: int) -> bool:
        run = run_of(root)
        return run is not None and len(run.settled) >= at_least

    with CeilingWatch(pg_server, name) as watch:
        proc_b, root_b = suites["b"].start(*options)
        wait_for(lambda: settled(root_b, 4), timeout=180, interval=0.02)
        proc_a, root_a = suites["a"].start(*options)
        # both runners' workers reserve at once; then B dies with instances in flight
        wait_for(lambda: settled(root_a, 5), timeout=180, interval=0.02)
        wait_for(
            lambda: len(getattr(run_of(root_b), "reservations", {})) >= 2,
            timeout=60,
            interval=0.005,
        )
        os.killpg(proc_b.pid, signal.SIGKILL)
        proc_b.communicate()
        out_a = finish(proc_a, timeout=600)
    assert proc_a.returncode in (0, 3), out_a
    rows_a = Run.of(root_a).rows
    run_b = Run.of(root_b).manifest["run_id"]

    # Nothing committed ever crossed the ceiling (hundreds of reads during the runs).
    assert watch.reads > 50 and watch.worst <= ceiling + EPS, (watch.reads, watch.worst)
    # B's custody is stale: another runner's new run is refused, naming it.
    (tmp_path / "c").mkdir()
    suite_c = Suite(tmp_path / "c")
    suite_c.tasks([{"id": "c", "work": "succeed", "cost": 0.1}])
    refused = suite_c.run(*options[:-2])
    assert refused.rc == 2, refused.out
    assert refused.manifest["refusal"]["reason"] == "campaign_stale_run"
    assert run_b in refused.manifest["refusal"]["message"]

    held = campaign.snapshot().active_runs[run_b]
    assert held.reservations, "B was killed with instances in flight"
    reconciled = _cli("reconcile", url, "--run", str(root_b), env=env)
    assert reconciled.returncode == 0, reconciled.stdout + reconciled.stderr
    assert f"reconciled run {run_b}" in reconciled.stdout

    row = _row(pg_server, name)
    state = row["state"]
    records = {r["run_id"]: r for r in state["runs"]}
    assert state["active_runs"] == {} and row["outstanding"] == 0.0
    # B: what it settled before the kill, plus each open reservation at its amount.
    record_b = records[run_b]
    assert record_b["reconciled"] and record_b["abandoned_count"] == len(held.reservations)
    open_usd = sum(max(r.amount_usd, 2.0) for r in held.reservations.values())
    assert abs(record_b["settled_usd"] - (sum(held.settled.values()) + open_usd)) < EPS
    # A: exactly the costs of its completed rows.
    run_a = Run.of(root_a).manifest["run_id"]
    completed_a = [r["cost_usd"] for r in rows_a if r["status"] == "completed"]
    assert abs(records[run_a]["settled_usd"] - sum(completed_a)) < EPS
    assert len({r["instance_id"] for r in rows_a}) == len(rows_a) == 120
    # The database's sums: every charge is in a run record, spent is their sum, and the
    # ceiling held (and bound: A was stopped by it).
    charges = pg_server.sql(
        "SELECT sum((r ->> 'settled_usd')::numeric) FROM harness_campaign, "
        "jsonb_array_elements(state -> 'runs') r WHERE name = %s",
        (name,),
    )[0][0]
    assert abs(float(charges) - state["settled_usd"]) < EPS
    assert abs(row["spent"] - state["settled_usd"]) < EPS
    assert ceiling - 2.0 * 4 < row["spent"] <= ceiling + EPS
    assert any(
        r["status"] == "blocked" and r["reason_code"] == "campaign_budget" for r in rows_a
    ), "the ceiling must bind"
    print(
        f"two runners: {watch.reads} reads of the row during the runs, largest spent + "
        f"outstanding ${watch.worst:.4f} of ${ceiling:g}; final spent ${row['spent']:.4f}; "
        f"A settled {len(completed_a)}, B settled {len(held.settled)} and was killed with "
        f"{len(held.reservations)} in flight"
    )


# ------------------------------------------------------------------------------- migrate


def test_migrate_moves_a_file_campaign_byte_for_byte_and_retires_the_file(
    tmp_path: Path, pg_server: PgServer, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.budget import campaign_command

    path = tmp_path / "campaign.json"
    file_campaign = Campaign.open_or_create(
        path,
        ceiling_usd=30.0,
        key_fingerprint=FINGERPRINT,
        baseline_usage=BASELINE,
        prior_spend_usd=1.0,
    )
    file_campaign.admit_run("done", tmp_path / "done", os.getpid())
    file_campaign.reserve("done", "b/a", 2.0)
    file_campaign.settle("done", "b/a", 0.75, True)
    file_campaign.finish_run("done", "completed")
    before = path.read_bytes()
    name = _name()
    url = pg_server.url(name)

    assert campaign_command(["migrate", str(path), url]) == 0
    assert f"moved campaign {path} to {url}" in capsys.readouterr().out
    # show --json on the URL prints exactly the bytes the file held
    assert campaign_command(["show", url, "--json"]) == 0
    assert capsys.readouterr().out.encode() == before
    assert campaign_command(["show", url]) == 0
    shown = capsys.readouterr().out
    assert f"campaign {url}" in shown and "$30.0000" in shown and "done: completed" in shown
    assert _row(pg_server, name)["spent"] == 1.75
    # the file now names the URL: a run (or a command) given it is refused
    moved = json.loads(path.read_text())
    assert moved["schema"] == "harness.campaign.moved.v1" and moved["moved_to"] == url
    assert moved["campaign"]["schema"] == CAMPAIGN_SCHEMA
    with pytest.raises(RefusalError) as refused:
        Campaign.open_or_create(
            path, ceiling_usd=30.0, key_fingerprint=FINGERPRINT, baseline_usage=BASELINE
        )
    assert refused.value.reason == "campaign_moved"
    assert f"--campaign-url {url}" in str(refused.value)
    assert campaign_command(["show", str(path)]) == 2
    assert "refused (campaign_moved)" in capsys.readouterr().err

    # the URL holds that campaign now: a second move is refused unless told
    other = tmp_path / "other.json"
    Campaign.open_or_create(other, ceiling_usd=5.0, key_fingerprint="none", baseline_usage=0.0)
    assert campaign_command(["migrate", str(other), url]) == 2
    err = capsys.readouterr().err
    assert "refused (campaign_exists)" in err and "--replace" in err and len(err.splitlines()) == 1
    assert json.loads(other.read_text())["schema"] == CAMPAIGN_SCHEMA  # untouched
    assert campaign_command(["migrate", str(other), url, "--replace"]) == 0
    capsys.readouterr()
    assert _row(pg_server, name)["ceiling"] == 5.0


def test_migrate_refuses_while_a_live_run_holds_custody_in_the_file(
    tmp_path: Path, pg_server: PgServer, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.budget import campaign_command

    path = tmp_path / "campaign.json"
    campaign = Campaign.open_or_create(
        path, ceiling_usd=30.0, key_fingerprint="none", baseline_usage=0.0
    )
    campaign.admit_run("live", tmp_path / "live", os.getpid())
    before = path.read_bytes()
    url = pg_server.url(_name())
    assert campaign_command(["migrate", str(path), url]) == 2
    err = capsys.readouterr().err
    assert "refused (campaign_in_use)" in err and "run live" in err
    assert path.read_bytes() == before
    assert campaign_command(["show", url]) == 2  # nothing was stored
    assert "does not exist" in capsys.readouterr().err
    # a dead run's custody moves with the campaign, to be reconciled on the URL
    campaign.finish_run("live", "completed")
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    campaign.admit_run("dead", tmp_path / "dead", holder.pid)
    campaign.reserve("dead", "b/x", 1.5)
    holder.kill()
    holder.wait()
    assert campaign_command(["migrate", str(path), url]) == 0
    capsys.readouterr()
    moved = Campaign(url)
    assert set(moved.snapshot().active_runs) == {"dead"}
    assert moved.snapshot().outstanding_usd == 1.5
    with pytest.raises(RefusalError) as stale:
        moved.admit_run("next", tmp_path / "next", os.getpid())
    assert stale.value.reason == "campaign_stale_run"
    assert f"harness campaign reconcile {url} --run" in str(stale.value)


# ------------------------------------------------------------------------------- secrets


def test_the_password_never_reaches_the_manifest_logs_or_argv(
    tmp_path: Path, pg_server: PgServer
) -> None:
    """A run given ``--campaign-url env:NAME`` (the URL, password included, in $NAME: a CI
    secret) records the URL with the password redacted; the password is in no file of the
    run root and in no process's argv. The URL with a password on the command line is
    refused before anything is written."""
    name = _name()
    secret_url = pg_server.url(name, tcp=True, password=True)
    redacted = secret_url.replace(f":{pg_server.password}@", ":***@")
    (tmp_path / "s").mkdir()
    suite = Suite(tmp_path / "s")
    suite.tasks([{"id": "t", "work": "sleep", "seconds": 0.3, "cost": 0.25, "count": 4}])
    options = (
        "--campaign-budget-usd",
        "10",
        "--per-task-reserve-usd",
        "1",
        "--unknown-cost-allowance-usd",
        "1",
        "--no-report",
        "-n",
        "2",
    )
    os.environ["HARNESS_TEST_CAMPAIGN_URL"] = secret_url
    try:
        proc, root = suite.start("--campaign-url", "env:HARNESS_TEST_CAMPAIGN_URL", *options)
        seen: list[str] = []

        def argv_of_the_run() -> bool:  # every process of the run's session, while it runs
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit():
                    try:
                        if os.getsid(int(entry.name)) == proc.pid:
                            seen.append((entry / "cmdline").read_bytes().decode(errors="replace"))
                    except (OSError, ProcessLookupError):
                        continue
            return len(seen) >= 3

        wait_for(argv_of_the_run, timeout=60, interval=0.05)
        out = finish(proc, timeout=300)
    finally:
        del os.environ["HARNESS_TEST_CAMPAIGN_URL"]
    assert proc.returncode == 0, out
    assert not any(pg_server.password in argv for argv in seen)
    assert pg_server.password not in out
    run = Run.of(root)
    assert {r["status"] for r in run.rows} == {"completed"} and len(run.rows) == 4
    budget = run.manifest["extra"]["budget"]
    assert budget["campaign_url"] == redacted and budget["campaign_file"] is None
    assert budget["final"]["campaign_url"] == redacted
    assert "env:HARNESS_TEST_CAMPAIGN_URL" in run.manifest["argv"]
    for path in root.rglob("*"):
        if path.is_file():
            assert pg_server.password.encode() not in path.read_bytes(), path
    assert _row(pg_server, name)["spent"] == 1.0

    # Written on the command line, the password is refused before any file is written.
    refused_root = tmp_path / "refused-root"
    refused = suite.run("--campaign-url", secret_url, *options, root=refused_root)
    assert refused.rc == 4, refused.out
    assert "holds a password" in refused.out and "env:NAME" in refused.out
    assert pg_server.password not in refused.out
    assert not refused_root.exists()


def test_show_settle_and_reconcile_on_the_url_read_the_password_from_the_environment(
    tmp_path: Path, pg_server: PgServer
) -> None:
    name = _name()
    url = pg_server.url(name, tcp=True)
    env = {"PGPASSWORD": pg_server.password}
    os.environ.update(env)
    try:
        campaign = Campaign.open_or_create(
            url, ceiling_usd=12.0, key_fingerprint=FINGERPRINT, baseline_usage=BASELINE
        )
        campaign.admit_run("r1", tmp_path / "r1", os.getpid())
        campaign.reserve("r1", "b/a", 3.0)
        settled = campaign.settle("r1", "b/a", 2.5, True)
        assert settled.campaign_spent_usd == 2.5 and settled.campaign_outstanding_usd == 0.0
        campaign.reserve("r1", "b/b", 3.0)
    finally:
        for key in env:
            del os.environ[key]
    shown = _cli("show", url, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "spent        $2.5000" in shown.stdout and "outstanding  $3.0000" in shown.stdout
    as_json = _cli(
        "show",
        "env:CAMPAIGN",
        "--json",
        env={"CAMPAIGN": pg_server.url(name, tcp=True, password=True)},
    )
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["settled_usd"] == 2.5
    # without the password: one line naming the fix, never the password
    denied = _cli("show", url)
    assert denied.returncode == 2 and len(denied.stderr.strip().splitlines()) == 1
    assert "password" in denied.stderr
    wrong = _cli(
        "show",
        pg_server.url(name, tcp=True, password=True).replace(
            pg_server.password, "not-the-password"
        ),
    )
    assert wrong.returncode == 2 and "not-the-password" not in wrong.stderr + wrong.stdout
    row = _row(pg_server, name)
    assert (row["ceiling"], row["spent"], row["outstanding"], row["available"]) == (
        12.0,
        2.5,
        3.0,
        6.5,
    )


# ------------------------------------------------------------------- the transaction


def test_a_held_campaign_lock_times_out_and_the_instance_is_refused(
    pg_server: PgServer, tmp_path: Path
) -> None:
    from harness.budget.pgstore import LOCK, LOCK_SPACE

    name = _name()
    Campaign.open_or_create(
        pg_server.url(name), ceiling_usd=10.0, key_fingerprint="none", baseline_usage=0.0
    ).admit_run("r1", tmp_path, os.getpid())
    campaign = Campaign(pg_server.url(name), lock_timeout_sec=0.3)
    holder = pg_server.connect()
    try:
        with holder.cursor() as cur:
            cur.execute(LOCK, (LOCK_SPACE, name))
        started = time.monotonic()
        with pytest.raises(BudgetRefused) as refused:
            campaign.reserve("r1", "b/a", 1.0)
        assert refused.value.reason == "campaign_persistence_failed"
        assert "could not lock campaign" in str(refused.value)
        assert 0.25 < time.monotonic() - started < 5
    finally:
        holder.close()  # its session ends: the lock goes with it
    assert campaign.reserve("r1", "b/a", 1.0).amount_usd == 1.0


def test_a_writer_that_bypasses_the_lock_makes_the_transaction_retry(
    pg_server: PgServer, tmp_path: Path
) -> None:
    """A transaction of another client changes the row under the reservation's snapshot:
    the SERIALIZABLE transaction fails to serialize, is retried, and then sees the change."""
    name = _name()
    campaign = Campaign.open_or_create(
        pg_server.url(name), ceiling_usd=10.0, key_fingerprint="none", baseline_usage=0.0
    )
    campaign.admit_run("r1", tmp_path, os.getpid())
    intruder = pg_server.connect()
    intruder.autocommit = False
    cur = intruder.cursor()
    # holds the row (not the advisory lock) with a change of its own
    cur.execute(
        "UPDATE harness_campaign SET state = jsonb_set(state, '{prior_spend_usd}', "
        "'4.0') WHERE name = %s",
        (name,),
    )
    result: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: result.update(r=campaign.reserve("r1", "b/a", 5.0)))
    worker.start()
    time.sleep(0.3)  # the reservation read its snapshot and waits on the row
    assert worker.is_alive()
    intruder.commit()
    worker.join(10)
    intruder.close()
    assert result["r"].campaign_spent_usd == 4.0  # it ran again, on the committed row
    with pytest.raises(BudgetRefused):
        campaign.reserve("r1", "b/b", 1.5)  # 4 + 5 + 1.5 > 10


def test_a_failing_save_stops_the_run(pg_server: PgServer, tmp_path: Path) -> None:
    """The database refuses the save (here a trigger for this campaign): the reservation is
    refused ``campaign_persistence_failed`` and nothing of it is stored."""
    name = _name()
    campaign = Campaign.open_or_create(
        pg_server.url(name), ceiling_usd=10.0, key_fingerprint="none", baseline_usage=0.0
    )
    campaign.admit_run("r1", tmp_path, os.getpid())
    pg_server.sql(f"""
        CREATE FUNCTION refuse_{name.replace("-", "_")}() RETURNS trigger AS $$
        BEGIN RAISE EXCEPTION 'disk full (test)'; END $$ LANGUAGE plpgsql;
        CREATE TRIGGER refuse_{name.replace("-", "_")} BEFORE UPDATE ON harness_campaign
        FOR EACH ROW WHEN (NEW.name = '{name}')
        EXECUTE FUNCTION refuse_{name.replace("-", "_")}();
    """)
    try:
        with pytest.raises(BudgetRefused) as refused:
            campaign.reserve("r1", "b/a", 1.0)
        assert refused.value.reason == "campaign_persistence_failed"
        assert "disk full (test)" in str(refused.value)
    finally:
        pg_server.sql(f"DROP TRIGGER refuse_{name.replace('-', '_')} ON harness_campaign")
    assert campaign.snapshot().active_runs["r1"].reservations == {}
    assert campaign.reserve("r1", "b/a", 1.0).amount_usd == 1.0  # the same connection, sane


def _refused_at_start(
    tmp_path: Path, budget_usd: float, campaign_url: str, campaign_file: str | None = None
) -> RefusalError:
    """The refusal of a run's budget on the campaign the options name."""
    settings = BudgetSettings(
        campaign_url=campaign_url,
        campaign_file=campaign_file,
        campaign_budget_usd=budget_usd,
        unknown_cost_allowance_usd=1.0,
    )
    with pytest.raises(RefusalError) as refused:
        ControllerBudget.start(settings, run_id="r", run_root=tmp_path)
    return refused.value


def test_an_unreachable_database_refuses_the_run_in_one_line(tmp_path: Path) -> None:
    unreachable = _refused_at_start(
        tmp_path, 10.0, campaign_url="postgresql://harness:s3cret-pw@127.0.0.1:1/harness?campaign=x"
    )
    message = str(unreachable)
    assert unreachable.reason == "campaign_unreachable" and "\n" not in message
    assert "s3cret-pw" not in message and "harness:***@127.0.0.1:1" in message
    conflict = _refused_at_start(
        tmp_path, 1.0, campaign_file=str(tmp_path / "c.json"), campaign_url="env:X"
    )
    assert conflict.reason == "campaign_options_conflict"
    missing = _refused_at_start(tmp_path, 1.0, campaign_url="env:HARNESS_NOT_SET_ANYWHERE")
    assert missing.reason == "campaign_url_unusable"
    assert "$HARNESS_NOT_SET_ANYWHERE is not set" in str(missing)


def test_a_forked_child_never_ends_the_parents_session(pg_server: PgServer, tmp_path: Path) -> None:
    """The child inherits the parent's open connection: it opens its own and drops the
    inherited one without ending it (were it closed, the parent's session would end and the
    parent would reconnect to another backend)."""
    import gc

    from harness.budget import pgstore

    name = _name()
    url = pg_server.url(name)
    campaign = Campaign.open_or_create(
        url, ceiling_usd=10.0, key_fingerprint="none", baseline_usage=0.0
    )
    campaign.admit_run("r1", tmp_path, os.getpid())
    campaign.reserve("r1", "b/parent-1", 1.0)
    store = campaign.backend
    assert isinstance(store, pgstore.PostgresCampaignStore)
    conn = pgstore._LOCAL.conns[store.url.dsn]
    with conn.raw.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        backend = cur.fetchone()[0]
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            campaign.reserve("r1", "b/child", 1.0)  # on a connection of its own
            del conn  # the last reference to the inherited one
            pgstore._LOCAL.conns.clear()
            gc.collect()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    campaign.reserve("r1", "b/parent-2", 1.0)
    assert pgstore._LOCAL.conns[store.url.dsn] is conn
    with conn.raw.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        assert cur.fetchone()[0] == backend
    assert set(campaign.snapshot().active_runs["r1"].reservations) == {
        "b/parent-1",
        "b/child",
        "b/parent-2",
    }


def test_a_run_without_a_ceiling_joins_the_existing_campaign(
    pg_server: PgServer, tmp_path: Path
) -> None:
    """The second runner needs only the URL: the ceiling is the campaign's; a campaign the
    URL does not hold yet needs --campaign-budget-usd, named in the refusal."""
    url = pg_server.url(_name())
    base: dict[str, Any] = {"campaign_url": url, "unknown_cost_allowance_usd": 1.0}
    with pytest.raises(RefusalError) as missing:
        ControllerBudget.start(BudgetSettings(**base), run_id="r0", run_root=tmp_path / "r0")
    assert missing.value.reason == "campaign_budget_missing" and url in str(missing.value)
    first = ControllerBudget.start(
        BudgetSettings(campaign_budget_usd=7.0, **base), run_id="r1", run_root=tmp_path / "r1"
    )
    second = ControllerBudget.start(BudgetSettings(**base), run_id="r2", run_root=tmp_path / "r2")
    assert first is not None and second is not None
    assert second.campaign.snapshot().ceiling_usd == 7.0
    assert set(second.campaign.snapshot().active_runs) == {"r1", "r2"}
    for budget in (first, second):
        monitor = budget.finish("completed", 0)
        assert monitor.campaign_url == url and monitor.campaign_file is None
    with pytest.raises(RefusalError) as changed:
        ControllerBudget.start(
            BudgetSettings(campaign_budget_usd=8.0, **base), run_id="r3", run_root=tmp_path / "r3"
        )
    assert changed.value.reason == "campaign_ceiling_changed"
    assert "a new campaign name (?campaign=NAME)" in str(changed.value)
