"""The campaign as a run sees it: creation, refusals, reservations, settlement (on a file
and on PostgreSQL: the ``campaign_where`` fixture)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.budget import (
    BudgetRefused,
    Campaign,
    CampaignStateError,
    MeterReading,
    campaign_command,
    check_disk,
    key_fingerprint,
)
from harness.core.errors import RefusalError
from tests.budget.budget_support import FINGERPRINT

MakeCampaign = Callable[..., Campaign]


def _reading(usage: float) -> MeterReading:
    now = time.time()
    return MeterReading(usage=usage, requested_at_unix=now, observed_at_unix=now, source="t")


@pytest.mark.parametrize("campaign_where", ["file"], indirect=True)
def test_created_file_holds_the_ceiling_fingerprint_and_baseline(
    make_campaign: MakeCampaign, campaign_path: Path
) -> None:
    make_campaign(50.0, prior_spend_usd=5.0)
    data = json.loads(campaign_path.read_text())
    assert data["schema"] == "harness.campaign.v1"
    assert data["ceiling_usd"] == 50.0
    assert data["key_fingerprint"] == FINGERPRINT
    assert data["usage_baseline"] == 10.0 and data["last_usage"] == 10.0
    assert data["spent_usd"] == 5.0 and data["remaining_usd"] == 45.0
    assert data["active_runs"] == {} and data["runs"] == []
    assert key_fingerprint("sk-secret").startswith("sha256:")
    assert len(key_fingerprint("sk-secret")) == len("sha256:") + 16


def test_reopening_refuses_a_changed_ceiling_key_or_prior_spend(
    make_campaign: MakeCampaign,
) -> None:
    make_campaign(50.0, prior_spend_usd=5.0)
    make_campaign(50.0, baseline_usage=99.0)  # same campaign; the baseline is never rebased
    with pytest.raises(RefusalError) as ceiling:
        make_campaign(60.0)
    assert ceiling.value.reason == "campaign_ceiling_changed" and "50" in str(ceiling.value)
    with pytest.raises(RefusalError) as key:
        make_campaign(50.0, key_fingerprint="sha256:ffffffffffffffff")
    assert key.value.reason == "campaign_key_changed"
    with pytest.raises(RefusalError) as prior:
        make_campaign(50.0, prior_spend_usd=7.0)
    assert prior.value.reason == "campaign_prior_spend_fixed"
    assert Campaign.open(make_campaign(50.0).location).snapshot().usage_baseline == 10.0


def test_reserve_settle_release_and_overrun(make_campaign: MakeCampaign, run_root: Path) -> None:
    campaign = make_campaign(10.0)
    campaign.admit_run("r1", run_root, os.getpid())
    first = campaign.reserve("r1", "b/one", 4.0, budget_reserve_usd=1.0)
    assert first.campaign_outstanding_usd == 4.0
    campaign.reserve("r1", "b/two", 4.0, budget_reserve_usd=1.0)
    with pytest.raises(BudgetRefused) as refused:
        campaign.reserve("r1", "b/three", 1.5, budget_reserve_usd=1.0)  # 8 + 1.5 + 1 > 10
    assert refused.value.reason == "campaign_budget"

    settled = campaign.settle("r1", "b/one", 1.0, True)
    assert not settled.overran and settled.charged_usd == 1.0
    assert settled.campaign_spent_usd == 1.0 and settled.campaign_outstanding_usd == 4.0
    over = campaign.settle("r1", "b/two", 5.0, True)
    assert over.overran and over.charged_usd == 5.0
    campaign.reserve("r1", "b/three", 1.5)
    campaign.release("r1", "b/three")

    state = campaign.snapshot()
    assert state.spent_usd == 6.0 and state.outstanding_usd == 0.0
    run = state.active_runs["r1"]
    assert run.overran == ["b/two"] and run.released == ["b/three"] and run.refused == {}
    with pytest.raises(CampaignStateError):
        campaign.settle("r1", "b/one", 1.0, True)  # one terminal outcome per instance
    with pytest.raises(CampaignStateError):
        campaign.reserve("r1", "b/one", 1.0)


def test_run_budget_and_unknown_cost(make_campaign: MakeCampaign, run_root: Path) -> None:
    campaign = make_campaign(100.0)
    campaign.admit_run("r1", run_root, os.getpid())
    campaign.reserve("r1", "b/a", 2.0, run_budget_usd=3.0)
    with pytest.raises(BudgetRefused) as refused:
        campaign.reserve("r1", "b/b", 2.0, run_budget_usd=3.0)
    assert refused.value.reason == "run_budget"
    unknown = campaign.settle("r1", "b/a", None, False)
    assert unknown.charged_usd == 2.0 and not unknown.cost_known
    assert campaign.snapshot().spent_usd == 2.0


def test_learned_figure_is_never_reserved_automatically(
    make_campaign: MakeCampaign, run_root: Path
) -> None:
    campaign = make_campaign(100.0)
    campaign.admit_run("r1", run_root, os.getpid())
    assert campaign.reserve("r1", "b/first").amount_usd == 0.0
    for i in range(5):
        campaign.reserve("r1", f"b/{i}", 1.0)
        campaign.settle("r1", f"b/{i}", 0.4, True)
    assert campaign.learned_reserve_usd(safety_factor=2.0) == pytest.approx(0.8)
    assert campaign.reserve("r1", "b/next").amount_usd == 0.0


def test_readings_only_go_up_and_meter_spend_counts(
    make_campaign: MakeCampaign, run_root: Path
) -> None:
    campaign = make_campaign(100.0)
    campaign.admit_run("r1", run_root, os.getpid())
    assert campaign.record_reading(_reading(13.0))
    assert not campaign.record_reading(_reading(12.0))
    assert not campaign.record_reading(_reading(float("nan")))
    state = campaign.snapshot()
    assert state.last_usage == 13.0 and state.spent_usd == 3.0
    record = campaign.finish_run("r1", "completed", _reading(14.0))
    assert record.metered_usd == 4.0 and record.final_usage == 14.0
    state = campaign.snapshot()
    assert state.active_runs == {} and [r.run_id for r in state.runs] == ["r1"]


def test_reservations_left_open_at_the_end_are_charged(
    make_campaign: MakeCampaign, run_root: Path
) -> None:
    campaign = make_campaign(100.0)
    campaign.admit_run("r1", run_root, os.getpid())
    campaign.reserve("r1", "b/worker-crashed", 3.0)
    record = campaign.finish_run("r1", "completed")
    assert record.abandoned_count == 1 and record.abandoned_usd == 3.0
    state = campaign.snapshot()
    assert state.spent_usd == 3.0 and state.outstanding_usd == 0.0


def test_stop_marker_refuses_every_later_reservation(
    make_campaign: MakeCampaign, run_root: Path
) -> None:
    campaign = make_campaign(100.0)
    campaign.admit_run("r1", run_root, os.getpid())
    campaign.request_stop("r1", "budget_meter_unavailable")
    with pytest.raises(BudgetRefused) as refused:
        campaign.reserve("r1", "b/a", 1.0)
    assert refused.value.reason == "budget_meter_unavailable"


def test_concurrent_live_runs_share_a_campaign(make_campaign: MakeCampaign, tmp_path: Path) -> None:
    campaign = make_campaign(100.0)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        campaign.admit_run("other", tmp_path / "other", other.pid)
        campaign.admit_run("mine", tmp_path / "mine", os.getpid())
        campaign.admit_run("mine", tmp_path / "mine", os.getpid())  # idempotent
        assert set(campaign.snapshot().active_runs) == {"other", "mine"}
        with pytest.raises(RefusalError) as dup:
            campaign.admit_run("other", tmp_path / "x", os.getpid())
        assert dup.value.reason == "campaign_run_id_in_use"
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize("campaign_where", ["file"], indirect=True)
def test_a_held_fcntl_lock_blocks_and_the_instance_is_refused(
    make_campaign: MakeCampaign, run_root: Path
) -> None:
    make_campaign(100.0).admit_run("r1", run_root, os.getpid())
    campaign = Campaign(make_campaign(100.0).path, lock_timeout_sec=0.3)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time\n"
            "f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX)\n"
            "print('held', flush=True); time.sleep(30)",
            str(campaign.lock_path),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        with pytest.raises(BudgetRefused) as refused:
            campaign.reserve("r1", "b/a", 1.0)
        assert refused.value.reason == "campaign_persistence_failed"
    finally:
        holder.kill()
        holder.wait()
    assert campaign.reserve("r1", "b/a", 1.0).amount_usd == 1.0


def test_show_prints_spend_and_active_runs(
    make_campaign: MakeCampaign, run_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    campaign = make_campaign(25.0)
    campaign.admit_run("r1", run_root, os.getpid(), identity="ci/shard-1-of-2")
    campaign.reserve("r1", "b/a", 2.5)
    assert campaign_command(["show", campaign.location]) == 0
    out = capsys.readouterr().out
    assert "$25.0000" in out and "r1" in out and "$2.5000" in out
    # alive, the lease it renews (90 s by default) and the shard it is
    assert re.search(r"\[alive, lease (89|90) s, ci/shard-1-of-2\]", out), out
    assert campaign_command(["show", campaign.location, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["outstanding_usd"] == 2.5
    assert campaign_command(["show", campaign.location + ".missing"]) == 2


def test_disk_reserve(tmp_path: Path) -> None:
    assert check_disk(tmp_path / "not" / "yet", 0).ok
    status = check_disk(tmp_path, 1e9)  # an exabyte
    assert not status.ok and status.free_bytes > 0 and status.path == str(tmp_path)
