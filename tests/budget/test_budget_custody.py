"""Custody: a SIGKILLed run leaves its entry; the next run refuses, naming it, until
``harness campaign reconcile`` proves no container of that run is left (real Docker)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.budget import Campaign, campaign_command
from harness.errors import RefusalError

MakeCampaign = Callable[..., Campaign]

HOLDER = """
import json, os, sys, time
from harness.budget import Campaign
args = json.loads(sys.argv[1])
campaign = Campaign.open_or_create(
    args["campaign"], ceiling_usd=100.0, key_fingerprint=args["fingerprint"], baseline_usage=10.0
)
campaign.admit_run(args["run_id"], args["run_root"], os.getpid())
campaign.reserve(args["run_id"], "b/in-flight", 2.0)
print("ready", flush=True)
time.sleep(60)
"""


@pytest.fixture
def docker_client() -> Iterator[Any]:
    import docker

    client = docker.from_env()  # no Docker: this test fails loudly, it never skips
    client.ping()
    yield client
    client.close()


def _crash_a_run(campaign: Campaign, tmp_path: Path, *, manifest: bool = True) -> tuple[str, Path]:
    run_id = f"crashed-{uuid.uuid4().hex[:8]}"
    run_root = tmp_path / run_id
    run_root.mkdir()
    if manifest:
        (run_root / "run_manifest.json").write_text(json.dumps({"run_id": run_id}))
    state = campaign.snapshot()
    args = {
        "campaign": str(campaign.path),
        "fingerprint": state.key_fingerprint,
        "run_id": run_id,
        "run_root": str(run_root),
    }
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, json.dumps(args)], stdout=subprocess.PIPE
    )
    assert holder.stdout is not None and holder.stdout.readline() == b"ready\n"
    os.kill(holder.pid, signal.SIGKILL)
    assert holder.wait() == -signal.SIGKILL
    return run_id, run_root


@pytest.mark.docker
def test_a_killed_run_blocks_admission_until_reconciled(
    make_campaign: MakeCampaign,
    tmp_path: Path,
    docker_client: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    campaign = make_campaign(100.0)
    crashed, crashed_root = _crash_a_run(campaign, tmp_path)
    # Its reservation is still visible to everyone.
    assert campaign.snapshot().outstanding_usd == 2.0

    with pytest.raises(RefusalError) as refused:
        campaign.admit_run("next", tmp_path / "next", os.getpid())
    assert refused.value.reason == "campaign_stale_run"
    assert crashed in str(refused.value) and "harness campaign reconcile" in str(refused.value)

    argv = ["reconcile", str(campaign.path), "--run", str(crashed_root), "--reading", "10.75"]
    assert campaign_command(argv) == 0
    assert f"reconciled run {crashed}" in capsys.readouterr().out

    state = campaign.snapshot()
    assert state.active_runs == {} and state.outstanding_usd == 0.0
    assert state.last_usage == 10.75 and state.spent_usd == 0.75  # the operator's reading
    assert state.runs[-1].run_id == crashed and state.runs[-1].reconciled
    campaign.admit_run("next", tmp_path / "next", os.getpid())


@pytest.mark.docker
def test_reconcile_refuses_while_a_labelled_container_exists(
    make_campaign: MakeCampaign,
    tmp_path: Path,
    docker_client: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from harness.sandbox.images import base_recipe, ensure_image

    image = ensure_image(base_recipe(), client=docker_client).image_id
    campaign = make_campaign(100.0)
    crashed, crashed_root = _crash_a_run(campaign, tmp_path)
    container = docker_client.containers.create(
        image, ["sleep", "60"], labels={"harness.run": crashed}, name=f"{crashed}-left"
    )
    try:
        container.start()
        argv = ["reconcile", str(campaign.path), "--run", str(crashed_root)]
        assert campaign_command(argv) == 2
        err = capsys.readouterr().err
        assert "containers_left" in err and f"{crashed}-left" in err
        assert crashed in campaign.snapshot().active_runs
    finally:
        container.remove(force=True)
    # Nothing left now: reconcile clears it; without a reading the open
    # reservation is charged at its amount.
    assert campaign_command(argv) == 0
    state = campaign.snapshot()
    assert state.active_runs == {} and state.spent_usd == 2.0


def test_reconcile_needs_the_run_manifest(
    make_campaign: MakeCampaign, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    campaign = make_campaign(100.0)
    crashed, crashed_root = _crash_a_run(campaign, tmp_path, manifest=False)
    argv = ["reconcile", str(campaign.path), "--run", str(crashed_root)]
    assert campaign_command(argv) == 2
    err = capsys.readouterr().err
    assert "run_manifest.json is missing" in err and str(crashed_root) in err
    assert crashed in campaign.snapshot().active_runs


def test_reconcile_refuses_a_live_run(
    make_campaign: MakeCampaign, run_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    campaign = make_campaign(100.0)
    campaign.admit_run("live", run_root, os.getpid())
    (run_root / "run_manifest.json").write_text(json.dumps({"run_id": "live"}))
    assert campaign_command(["reconcile", str(campaign.path), "--run", str(run_root)]) == 2
    assert "still running" in capsys.readouterr().err


@pytest.mark.docker
def test_point6_reconcile_refuses_while_a_labelled_network_exists(
    make_campaign: MakeCampaign,
    tmp_path: Path,
    docker_client: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    campaign = make_campaign(100.0)
    crashed, crashed_root = _crash_a_run(campaign, tmp_path)
    network = docker_client.networks.create(
        f"{crashed}-net", internal=True, labels={"harness.run": crashed}
    )
    argv = ["reconcile", str(campaign.path), "--run", str(crashed_root)]
    try:
        assert campaign_command(argv) == 2
        err = capsys.readouterr().err
        assert "networks_left" in err and f"{crashed}-net" in err
        assert crashed in campaign.snapshot().active_runs
    finally:
        network.remove()
    assert campaign_command(argv) == 0
    assert campaign.snapshot().active_runs == {}


@pytest.mark.docker
def test_point6_custody_stays_unsettled_when_a_network_survives_cleanup(
    tmp_path: Path, docker_client: Any
) -> None:
    """The run's final sweep cannot remove a labelled network (a foreign container still
    uses it): the run ends, but its custody stays in the campaign until reconciled."""
    from harness.sandbox.images import base_recipe, ensure_image
    from harness.testing.suite import Suite

    run_id = f"unsettled-{uuid.uuid4().hex[:8]}"
    image = ensure_image(base_recipe(), client=docker_client).image_id
    network = docker_client.networks.create(
        f"{run_id}-net", internal=True, labels={"harness.run": run_id}
    )
    holder = docker_client.containers.run(
        image, ["sleep", "300"], detach=True, network=network.name, name=f"{run_id}-holder"
    )
    campaign = tmp_path / "campaign.json"
    try:
        (tmp_path / "s").mkdir()
        suite = Suite(tmp_path / "s")
        suite.tasks([{"id": "u", "work": "succeed", "cost": 1}])
        run = suite.run("--run-id", run_id, "--campaign-file", str(campaign),
                        "--campaign-budget-usd", "50", "--no-report", timeout=300)
        assert run.rows and run.rows[-1]["status"] == "completed", run.out
        state = json.loads(campaign.read_text())
        assert run_id in state["active_runs"], "custody must stay unsettled"
        monitor = json.loads((run.root / "monitor.json").read_text())
        assert monitor["campaign_settlement"] == "unconfirmed"
        assert f"{run_id}-net" in monitor["custody_unsettled"]
        assert "harness campaign reconcile" in run.out
    finally:
        holder.remove(force=True)
        network.remove()
    reconcile = subprocess.run(
        [sys.executable, "-m", "harness.cli", "campaign", "reconcile", str(campaign),
         "--run", str(run.root)], capture_output=True, text=True)
    assert reconcile.returncode == 0, reconcile.stdout + reconcile.stderr
    assert json.loads(campaign.read_text())["active_runs"] == {}


@pytest.mark.docker
def test_point8_dead_runs_custody_refuses_until_reconciled_live_runs_share(
    make_campaign: MakeCampaign, tmp_path: Path, docker_client: Any
) -> None:
    """Live runs (their controllers running) may share one campaign; an ``active_run``
    whose process is dead refuses every new run until ``harness campaign reconcile``."""
    campaign = make_campaign(100.0)
    campaign.admit_run("live-a", tmp_path / "a", os.getpid())
    live_b = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        campaign.admit_run("live-b", tmp_path / "b", live_b.pid)  # concurrent: admitted
        crashed, crashed_root = _crash_a_run(campaign, tmp_path)
        for attempt in ("next", "next-again"):
            with pytest.raises(RefusalError) as refused:
                campaign.admit_run(attempt, tmp_path / attempt, os.getpid())
            assert refused.value.reason == "campaign_stale_run" and crashed in str(refused.value)
        assert campaign_command(["reconcile", str(campaign.path), "--run", str(crashed_root)]) == 0
        campaign.admit_run("next", tmp_path / "next", os.getpid())
        assert set(campaign.snapshot().active_runs) == {"live-a", "live-b", "next"}
    finally:
        live_b.kill()
        live_b.wait()
