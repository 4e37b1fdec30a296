"""Custody across machines: an entry carries a lease its controller renews; another machine
counts it dead once the lease expired (never before), a re-run with the same shard identity
takes it over wherever it ran, reconcile never clears a live lease and can settle a lost
runner from the campaign's records alone. Each test runs on a campaign file and on
PostgreSQL (``campaign_where``); "another machine" is ``HARNESS_HOST_ID``."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.budget import BudgetRefused, Campaign, campaign_command, custody
from harness.budget import errors as E
from harness.budget.session import BudgetSettings, ControllerBudget
from harness.budget.supervisor import MeterSupervisor
from harness.core.errors import RefusalError

MakeCampaign = Callable[..., Campaign]
SHARD = "github:team/bench/run-77/shard-1-of-2"


def _on(monkeypatch: pytest.MonkeyPatch, host: str) -> None:
    monkeypatch.setenv(custody.HOST_ID_ENV, host)


def _age_lease(campaign: Campaign, run_id: str, left_sec: float) -> None:
    """The lease as it would stand ``left_sec`` from expiry (negative: expired)."""

    def change(state):  # type: ignore[no-untyped-def]
        state.active_runs[run_id].lease_expires_unix = time.time() + left_sec

    campaign._mutate(change)


def test_a_lease_decides_liveness_seen_from_another_machine(
    make_campaign: MakeCampaign, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    campaign = make_campaign()
    _on(monkeypatch, "runner-a")
    entry = campaign.admit_run("r1", str(tmp_path / "a" / "runs" / "r1"), 999_999, lease_sec=30)
    assert entry.lease_expires_unix is not None and entry.host == "runner-a"
    _on(monkeypatch, "runner-b")
    assert custody.liveness(campaign.snapshot().active_runs["r1"]) == "alive"
    _age_lease(campaign, "r1", -1)
    assert custody.liveness(campaign.snapshot().active_runs["r1"]) == "dead"
    old = campaign.snapshot().active_runs["r1"].model_copy(update={"lease_expires_unix": None})
    assert custody.liveness(old) == "unknown"  # an entry from before leases


def test_a_rerun_with_the_shard_identity_takes_the_dead_custody_over(
    make_campaign: MakeCampaign, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    campaign = make_campaign()
    _on(monkeypatch, "runner-a")
    campaign.admit_run("r1", str(tmp_path / "a" / "runs" / "shard-1"), 999_999, identity=SHARD)
    campaign.reserve("r1", "pb/a", 2.0)
    _on(monkeypatch, "runner-b")
    with pytest.raises(RefusalError) as live:
        campaign.admit_run("r2", str(tmp_path / "b" / "runs" / "shard-1"), 1234, identity=SHARD)
    assert live.value.reason == E.CAMPAIGN_LEASE_LIVE  # never taken while its lease runs
    _age_lease(campaign, "r1", -1)
    other = campaign.admit_run("o1", str(tmp_path / "c" / "runs" / "other"), 4321, identity="github:x/shard-2-of-2")
    assert other.took_over == []  # another shard neither takes it nor is refused by it
    assert campaign.snapshot().outstanding_usd == pytest.approx(2.0)  # its hold still counts
    entry = campaign.admit_run("r2", str(tmp_path / "b" / "runs" / "shard-1"), 1234, identity=SHARD)
    assert entry.took_over == ["r1"] and entry.inherited["pb/a"].amount_usd == 2.0
    record = campaign.snapshot().runs[-1]
    assert (record.run_id, record.outcome, record.taken_over_by) == ("r1", "taken_over", "r2")
    with pytest.raises(E.CampaignStateError, match=E.CAMPAIGN_LEASE_LOST):
        campaign.renew_lease("r1")  # the lost runner, back: its custody is gone


def test_a_resume_takes_over_by_run_id_when_the_root_moved(
    make_campaign: MakeCampaign, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    campaign = make_campaign()
    _on(monkeypatch, "runner-a")
    campaign.admit_run("r1", str(tmp_path / "a" / "runs" / "shard-1"), 999_999)
    campaign.reserve("r1", "pb/a", 1.0)
    _age_lease(campaign, "r1", -1)
    _on(monkeypatch, "runner-b")
    with pytest.raises(RefusalError) as stale:  # a dead entry without identity: refused
        campaign.admit_run("x", str(tmp_path / "c" / "runs" / "x"), 1)
    assert stale.value.reason == E.CAMPAIGN_STALE_RUN
    entry = campaign.admit_run("r2", str(tmp_path / "b" / "prev" / "run-shard-1"), 1234,
                               resumes=[str(tmp_path / "b" / "prev" / "run-shard-1")],
                               resumed_run_ids=["r1"])
    assert entry.took_over == ["r1"]


def test_renewal_keeps_the_lease_and_an_expired_lease_stops_reservations(
    make_campaign: MakeCampaign, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    campaign = make_campaign()
    campaign.admit_run("r1", str(tmp_path / "a" / "runs" / "r1"), 999_999, lease_sec=8)
    before = campaign.snapshot().active_runs["r1"].lease_expires_unix
    time.sleep(0.05)
    assert campaign.renew_lease("r1") > (before or 0)
    _age_lease(campaign, "r1", -1)
    with pytest.raises(BudgetRefused) as refused:
        campaign.reserve("r1", "pb/a", 0.0)
    assert refused.value.reason == E.CAMPAIGN_LEASE_LOST
    with pytest.raises(E.CampaignStateError, match="expired"):
        campaign.renew_lease("r1")


def test_the_supervisor_renews_the_lease_and_stops_when_it_is_lost(
    make_campaign: MakeCampaign, tmp_path: Path
) -> None:
    campaign = make_campaign()
    campaign.admit_run("r1", str(tmp_path), 999_999, lease_sec=8)
    clock = [0.0]
    stops: list[str] = []
    sup = MeterSupervisor(campaign, "r1", tmp_path, None, lease_sec=8,
                          clock=lambda: clock[0], on_stop=stops.append)
    first = campaign.snapshot().active_runs["r1"].lease_expires_unix
    clock[0] = 2.5  # past a quarter of the lease
    time.sleep(0.05)
    assert sup.poll() is None
    assert (campaign.snapshot().active_runs["r1"].lease_expires_unix or 0) > (first or 0)
    _age_lease(campaign, "r1", -1)
    clock[0] = 5.0
    assert sup.poll() == E.CAMPAIGN_LEASE_LOST and stops == [E.CAMPAIGN_LEASE_LOST]


def test_admission_waits_out_the_lease_of_its_own_earlier_attempt(
    make_campaign: MakeCampaign, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    campaign = make_campaign(key_fingerprint="none")
    _on(monkeypatch, "runner-a")
    campaign.admit_run("r1", str(tmp_path / "a" / "runs" / "r1"), 999_999, identity=SHARD, lease_sec=4)
    _on(monkeypatch, "runner-b")
    url = campaign.cli_arg.startswith("postgresql")
    settings = BudgetSettings(campaign_file=None if url else campaign.cli_arg,
                              campaign_url=campaign.cli_arg if url else None,
                              unknown_cost_allowance_usd=0.5, custody_identity=SHARD,
                              custody_lease_sec=4)
    began = time.monotonic()
    budget = ControllerBudget.start(settings, run_id="r2", run_root=tmp_path, pid=1234)
    waited = time.monotonic() - began
    assert budget is not None
    assert 2.0 < waited < 40.0, waited  # it waited for the old lease, not forever
    assert campaign.snapshot().active_runs["r2"].took_over == ["r1"]
    assert "waiting for the lease of " + SHARD in capsys.readouterr().err


def test_reconcile_refuses_a_live_lease_and_settles_a_lost_runner(
    make_campaign: MakeCampaign, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    campaign = make_campaign()
    _on(monkeypatch, "runner-a")
    campaign.admit_run("r1", str(tmp_path / "gone" / "runs" / "shard-1"), 999_999, unknown_cost_allowance_usd=0.5)
    campaign.reserve("r1", "pb/a", 2.0)
    campaign.reserve("r1", "pb/b", 0.0)
    _on(monkeypatch, "operator-laptop")
    assert campaign_command(["reconcile", campaign.cli_arg, "--lost", "r1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "refused (campaign_lease_live)" in err and len(err.splitlines()) == 1
    assert "r1" in campaign.snapshot().active_runs  # nothing cleared
    _age_lease(campaign, "r1", -1)
    assert campaign_command(["reconcile", campaign.cli_arg, "--lost", "r1"]) == 0
    out = capsys.readouterr().out
    # each open hold charged at the hold (the allowance for the $0 one): $2.50
    assert "2 open reservation(s) charged as unknown spend at the hold, $2.5000" in out
    assert "not checked" in out
    state = campaign.snapshot()
    assert "r1" not in state.active_runs and state.runs[-1].reconciled
    assert state.settled_usd == pytest.approx(2.5)
