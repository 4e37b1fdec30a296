"""Meter faults stop the run with the right reason and leave a final monitor.json.

Timings are scaled down (blindness of one second) so each test takes about a second.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from harness.budget import (
    BudgetRefused,
    Campaign,
    Meter,
    MeterSupervisor,
    Monitor,
    make_meter,
    read_monitor,
)
from harness.testing.fake_meter import FakeFileMeter
from tests.budget.budget_support import KeyEndpoint

MakeCampaign = Callable[..., Campaign]
FAST: dict[str, Any] = {
    "poll_sec": 0.1,
    "retry_sec": 0.05,
    "read_timeout_sec": 0.3,
    "blindness_sec": 1.0,
}


def _write_usage(path: Path, usage: float) -> None:
    path.write_text(json.dumps({"usage": usage}))  # json writes NaN for nan


def _supervise_until_stop(supervisor: MeterSupervisor, limit_sec: float = 5.0) -> str:
    deadline = time.monotonic() + limit_sec
    while time.monotonic() < deadline:
        reason = supervisor.poll()
        if reason is not None:
            return reason
        time.sleep(0.02)
    raise AssertionError("the supervisor never stopped the run")


def _start(
    make_campaign: MakeCampaign, run_root: Path, meter: Meter
) -> tuple[Campaign, MeterSupervisor]:
    campaign = make_campaign(100.0)
    campaign.admit_run("r1", run_root, os.getpid())
    supervisor = MeterSupervisor(campaign, "r1", run_root, meter, **FAST)
    return campaign, supervisor


def _assert_final_monitor(run_root: Path, reason: str) -> Monitor:
    monitor = read_monitor(run_root)
    assert monitor.finished and monitor.stop_reason == reason
    assert monitor.runner_exit_code == 3
    assert monitor.disk is not None and monitor.disk.free_bytes > 0
    return monitor


@pytest.mark.parametrize("bad_usage", [10.5, float("nan")], ids=["goes-down", "nan"])
def test_rejected_readings_blind_the_run(
    make_campaign: MakeCampaign, run_root: Path, tmp_path: Path, bad_usage: float
) -> None:
    usage = tmp_path / "usage.json"
    _write_usage(usage, 11.0)
    campaign, supervisor = _start(make_campaign, run_root, FakeFileMeter(usage))
    assert supervisor.poll() is None  # 11.0 accepted and saved
    assert campaign.snapshot().last_usage == 11.0
    live = read_monitor(run_root)
    assert not live.finished and live.meter.last_usage == 11.0 and live.stop_reason is None

    _write_usage(usage, bad_usage)
    assert _supervise_until_stop(supervisor) == "budget_meter_unavailable"
    # Workers see the stop through the campaign file: nothing new starts.
    with pytest.raises(BudgetRefused) as refused:
        campaign.reserve("r1", "b/next", 1.0)
    assert refused.value.reason == "budget_meter_unavailable"

    supervisor.finish("stopped", runner_exit_code=3)
    monitor = _assert_final_monitor(run_root, "budget_meter_unavailable")
    assert monitor.campaign_settlement == "recorded"
    rejected = [d for d in monitor.meter_diagnostics if not d.accepted]
    assert rejected and all(d.error_type == "rejected" for d in rejected)
    expected = "went down" if bad_usage == bad_usage else "non-finite"
    assert expected in (rejected[0].error or "")
    assert campaign.snapshot().last_usage == 11.0  # never lowered, never NaN


def test_a_read_slower_than_the_blindness_bound_stops_the_run(
    make_campaign: MakeCampaign, run_root: Path, key_endpoint: KeyEndpoint
) -> None:
    key_endpoint.delay_sec = 5.0  # longer than blindness_sec and the read timeout
    meter = make_meter(f"openrouter={key_endpoint.base_url}", environ={"OPENROUTER_API_KEY": "k"})
    assert meter is not None
    _, supervisor = _start(make_campaign, run_root, meter)
    assert _supervise_until_stop(supervisor) == "budget_meter_unavailable"
    supervisor.finish("stopped", runner_exit_code=3)
    monitor = _assert_final_monitor(run_root, "budget_meter_unavailable")
    assert {d.error_type for d in monitor.meter_diagnostics} == {"timeout"}
    assert "within 0.3s" in (monitor.meter.error or "")


@contextmanager
def _immutable(directory: Path) -> Iterator[None]:
    """The directory refuses new files even to root (ext4 immutable flag)."""
    assert shutil.which("chattr"), "chattr (e2fsprogs) is needed by this test"
    done = subprocess.run(["chattr", "+i", str(directory)], capture_output=True)
    assert done.returncode == 0, f"cannot make {directory} immutable: {done.stderr!r}"
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(directory)], check=True)


@contextmanager
def _replaced_by_a_file(directory: Path) -> Iterator[None]:
    """The campaign's directory vanishes and a plain file takes its place."""
    aside = directory.with_name(directory.name + ".aside")
    directory.rename(aside)
    directory.write_text("not a directory")
    try:
        yield
    finally:
        directory.unlink()
        aside.rename(directory)


@pytest.mark.parametrize("campaign_where", ["file"], indirect=True)  # PostgreSQL: its own
@pytest.mark.parametrize("breakage", [_immutable, _replaced_by_a_file], ids=["immutable", "gone"])
def test_a_failing_save_stops_the_run(
    make_campaign: MakeCampaign,
    run_root: Path,
    tmp_path: Path,
    breakage: Callable[[Path], contextlib.AbstractContextManager[None]],
) -> None:
    usage = tmp_path / "usage.json"
    _write_usage(usage, 11.0)
    campaign, supervisor = _start(make_campaign, run_root, FakeFileMeter(usage))
    campaign.reserve("r1", "b/running", 2.0)
    assert supervisor.poll() is None
    _write_usage(usage, 12.0)
    time.sleep(FAST["poll_sec"])
    with breakage(campaign.path.parent):
        assert supervisor.poll() == "campaign_persistence_failed"
        with pytest.raises(BudgetRefused) as refused:
            campaign.reserve("r1", "b/next", 1.0)
        assert refused.value.reason == "campaign_persistence_failed"
        supervisor.finish("stopped", runner_exit_code=3)
    assert supervisor.finish("stopped", runner_exit_code=3).campaign_settlement == "unconfirmed"
    monitor = _assert_final_monitor(run_root, "campaign_persistence_failed")
    assert monitor.campaign_settlement == "unconfirmed"
    assert "could not" in (monitor.meter.error or "")
    # The last saved state is intact: the run still holds custody, to be reconciled.
    state = campaign.snapshot()
    assert state.last_usage == 11.0 and "r1" in state.active_runs


def test_blindness_must_leave_room_for_one_slow_read(
    make_campaign: MakeCampaign, run_root: Path, tmp_path: Path
) -> None:
    campaign = make_campaign(100.0)
    with pytest.raises(ValueError, match="must exceed"):
        MeterSupervisor(
            campaign, "r1", run_root, FakeFileMeter(tmp_path / "u"),
            blindness_sec=15, poll_sec=15, read_timeout_sec=5,
        )  # fmt: skip


def test_spend_reaching_the_budget_reserve_stops_the_run(
    make_campaign: MakeCampaign, run_root: Path, tmp_path: Path
) -> None:
    usage = tmp_path / "usage.json"
    _write_usage(usage, 10.0)
    campaign = make_campaign(20.0)
    campaign.admit_run("r1", run_root, os.getpid())
    supervisor = MeterSupervisor(
        campaign, "r1", run_root, FakeFileMeter(usage), budget_reserve_usd=5.0, **FAST
    )
    assert supervisor.poll() is None
    _write_usage(usage, 25.0)  # $15 spent: only the $5 reserve is left
    assert _supervise_until_stop(supervisor) == "campaign_budget"
    supervisor.finish("stopped", runner_exit_code=3)
    monitor = _assert_final_monitor(run_root, "campaign_budget")
    assert monitor.campaign_spent_usd == 15.0 and monitor.campaign_remaining_usd == 5.0
