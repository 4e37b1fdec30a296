"""Scenario (issue 27 point 2 meets issue 23 item 2): a campaign in PostgreSQL
(``--campaign-url``), a SIGKILL with instances in flight, and the resume that takes the
custody over on the URL.

A real PostgreSQL server (:mod:`tests.budget.pg_support`) holds the campaign; the runs reach
it as CI does, ``--campaign-url env:HARNESS_CAMPAIGN_URL`` with the URL (loopback TCP) in that
variable and the password in ``PGPASSWORD``. A run of the selftest benchmark on two xdist
workers settles one instance, then is SIGKILLed (controller and workers) with the two others
in flight. Asserted:

* a new run on the campaign is refused (``campaign_stale_run``), naming the resume and the
  reconcile command with ``env:HARNESS_CAMPAIGN_URL`` (never the URL or its password);
* the resume of that very run is admitted on the URL and takes the custody over (the killed
  run's record says ``taken_over`` by the resume, nothing is left active);
* nothing lost, nothing run twice: the settled instance is carried (not run again), each
  instance that was in flight runs once in the resume;
* money exact in the database: the settled instance once, each new attempt at its reported
  cost, each dead attempt at its hold (the selftest agent cannot reattach), nothing
  outstanding; ``harness campaign show env:HARNESS_CAMPAIGN_URL`` says the same;
* the password is on no file of either run root.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.budget import Campaign
from harness.budget.models import ActiveRun
from tests.budget.pg_support import PgServer, serving
from tests.support.suite import Run, Suite, run_cli, wait_for

pytestmark = pytest.mark.postgres

URL_ENV = "HARNESS_CAMPAIGN_URL"
HOLD = 3.0  # --per-task-reserve-usd and the unknown-cost allowance: a dead attempt's charge
OPTIONS = (
    "--campaign-url", f"env:{URL_ENV}", "--campaign-budget-usd", "50",
    "--per-task-reserve-usd", str(HOLD), "--unknown-cost-allowance-usd", str(HOLD),
    "--no-report", "--harness-progress", "off",
)  # fmt: skip


@pytest.fixture(scope="module")
def pg_server() -> Iterator[PgServer]:
    yield from serving()


def test_a_run_killed_on_a_url_campaign_is_resumed_and_charged_once(
    tmp_path: Path, pg_server: PgServer
) -> None:
    name = f"s-{uuid.uuid4().hex[:12]}"
    url = pg_server.url(name, tcp=True)  # the runs': loopback TCP, the password in the env
    env = {URL_ENV: url, "PGPASSWORD": pg_server.password}
    (tmp_path / "s").mkdir()
    suite = Suite(tmp_path / "s", extra_env=env)
    suite.tasks(
        [
            {"id": "done", "work": "succeed", "cost": 0.5},
            {"id": "k", "work": "sleep", "seconds": 60, "cost": 1, "count": 2},
        ]
    )
    campaign = Campaign.open_or_create(  # this test's view: the server's socket (trust)
        pg_server.url(name), ceiling_usd=50.0, key_fingerprint="none", baseline_usage=0.0
    )

    def active(root: Path) -> ActiveRun | None:
        found = [r for r in campaign.snapshot().active_runs.values() if Path(r.run_root) == root]
        return found[0] if found else None

    def settled_one_and_two_in_flight(root: Path) -> bool:
        run = active(root)
        return run is not None and len(run.settled) == 1 and len(run.reservations) == 2

    # 1. Two workers: "done" settles, both sleepers hold their reservation; SIGKILL.
    proc, root = suite.start(*OPTIONS, "-n", "2")
    wait_for(lambda: settled_one_and_two_in_flight(root.absolute()), timeout=60)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    killed_id = Run.of(root).manifest["run_id"]
    killed = campaign.snapshot().active_runs[killed_id]
    assert list(killed.settled) == ["selftest/done"]
    assert sorted(killed.reservations) == ["selftest/k-0000", "selftest/k-0001"]

    # 2. Another run is refused while the killed run's custody is stale.
    suite.tasks([{"id": "done", "work": "succeed", "cost": 0.5},
                 {"id": "k", "work": "succeed", "cost": 1, "count": 2}])  # fmt: skip
    refused = suite.run(*OPTIONS)
    assert refused.rc == 2, refused.out
    refusal = refused.manifest["refusal"]
    assert refusal["reason"] == "campaign_stale_run"
    assert f"--resume-from {root.absolute()}" in refusal["message"]
    assert f"harness campaign reconcile env:{URL_ENV} --run" in refusal["message"]

    # 3. The resume of that very run takes its custody over, on the URL.
    resumed = suite.run(*OPTIONS, "--resume-from", str(root))
    assert resumed.rc == 0, resumed.out
    assert resumed.manifest["extra"]["budget"]["campaign_url"] == url  # no password in it
    final = resumed.latest
    assert final["done"]["outcome"] == "carried_forward"
    assert {final[k]["outcome"] for k in ("k-0000", "k-0001")} == {"scored"}
    assert sorted(resumed.executions()) == ["k-0000", "k-0001"]  # "done" is not run again
    for k in ("k-0000", "k-0001"):
        assert final[k]["details"]["budget"]["earlier_attempts_usd"] == HOLD  # the dead attempt
        assert final[k]["details"]["budget"]["charged_usd"] == 1.0 + HOLD  # and its own cost

    state = campaign.snapshot()
    assert state.active_runs == {}
    [taken] = [r for r in state.runs if r.run_id == killed_id]
    assert taken.outcome == "taken_over" and taken.taken_over_by == resumed.manifest["run_id"]
    assert taken.settled_usd == 0.5  # what it settled before the kill
    [own] = [r for r in state.runs if r.run_id == resumed.manifest["run_id"]]
    assert own.took_over == [killed_id] and own.settled_count == 2
    assert own.settled_usd == 2 * 1.0 + 2 * HOLD and own.abandoned_count == 0
    assert state.spent_usd == 0.5 + 2 * 1.0 + 2 * HOLD and state.outstanding_usd == 0.0
    show = run_cli("campaign", "show", f"env:{URL_ENV}", env={**os.environ, **env}, timeout=60)
    assert show.returncode == 0, show.stdout + show.stderr
    assert f"spent        ${state.spent_usd:,.4f}" in show.stdout
    assert f"{killed_id}: taken_over (by {resumed.manifest['run_id']})" in show.stdout

    # The password reached no file of either run.
    for run_root in (root, resumed.root):
        for path in run_root.rglob("*"):
            if path.is_file():
                assert pg_server.password.encode() not in path.read_bytes(), path
