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
from harness.budget.campaign import instance_of, try_key
from harness.core.errors import RefusalError
from tests.sandbox.engines.engines_support import Engine, second_engine
from tests.support.suite import run_cli

__all__ = ["second_engine"]  # the session fixture (a second dockerd), for item 7

MakeCampaign = Callable[..., Campaign]

HOLDER = """
import json, os, sys, time
from harness.budget import Campaign
args = json.loads(sys.argv[1])
campaign = Campaign.open_or_create(
    args["campaign"], ceiling_usd=100.0, key_fingerprint=args["fingerprint"], baseline_usage=10.0
)
campaign.admit_run(args["run_id"], args["run_root"], os.getpid())
for key, cost in args["settled"]:
    campaign.reserve(args["run_id"], key, 1.0)
    campaign.settle(args["run_id"], key, cost, True)
campaign.reserve(args["run_id"], args["in_flight"], 2.0)
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


def _crash_a_run(
    campaign: Campaign,
    tmp_path: Path,
    *,
    manifest: bool = True,
    settled: tuple[tuple[str, float], ...] = (),
    in_flight: str = "b/in-flight",
) -> tuple[str, Path]:
    """A run killed holding 2.0 for ``in_flight``, after settling ``settled`` (key, cost)."""
    run_id = f"crashed-{uuid.uuid4().hex[:8]}"
    run_root = tmp_path / run_id
    run_root.mkdir()
    if manifest:
        (run_root / "run_manifest.json").write_text(json.dumps({"run_id": run_id}))
    state = campaign.snapshot()
    args = {
        "campaign": campaign.location,
        "fingerprint": state.key_fingerprint,
        "run_id": run_id,
        "run_root": str(run_root),
        "settled": list(settled),
        "in_flight": in_flight,
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

    argv = ["reconcile", campaign.location, "--run", str(crashed_root), "--reading", "10.75"]
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
    from harness.sandbox.images.build import base_recipe, ensure_image

    image = ensure_image(base_recipe(), client=docker_client).image_id
    campaign = make_campaign(100.0)
    crashed, crashed_root = _crash_a_run(campaign, tmp_path)
    container = docker_client.containers.create(
        image, ["sleep", "60"], labels={"harness.run": crashed}, name=f"{crashed}-left"
    )
    try:
        container.start()
        argv = ["reconcile", campaign.location, "--run", str(crashed_root)]
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
    argv = ["reconcile", campaign.location, "--run", str(crashed_root)]
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
    assert campaign_command(["reconcile", campaign.location, "--run", str(run_root)]) == 2
    assert "still running" in capsys.readouterr().err


@pytest.mark.docker
def test_reconcile_refuses_while_a_labelled_network_exists(
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
    argv = ["reconcile", campaign.location, "--run", str(crashed_root)]
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
def test_custody_stays_unsettled_when_a_network_survives_cleanup(
    tmp_path: Path, docker_client: Any
) -> None:
    """The run's final sweep cannot remove a labelled network (a foreign container still
    uses it): the run ends, but its custody stays in the campaign until reconciled."""
    from harness.sandbox.images.build import base_recipe, ensure_image
    from tests.support.suite import Suite

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
                        "--campaign-budget-usd", "50", "--unknown-cost-allowance-usd", "1",
                        "--no-report", timeout=300)
        assert run.rows and run.rows[-1]["status"] == "completed", run.out
        state = json.loads(campaign.read_text())
        assert run_id in state["active_runs"], "custody must stay unsettled"
        monitor = json.loads((run.root / "monitor.json").read_text())
        assert monitor["campaign_settlement"] == "unconfirmed"
        assert f"{run_id}-net" in monitor["custody_unsettled"]
        run.result.stdout.fnmatch_lines([
            f"*harness: campaign custody of run {run_id} stays unsettled: *; once they are gone run:"
            f" harness campaign reconcile {campaign} --run {run.root}"])
    finally:
        holder.remove(force=True)
        network.remove()
    reconcile = run_cli("campaign", "reconcile", str(campaign), "--run", str(run.root))
    assert reconcile.returncode == 0, reconcile.stdout + reconcile.stderr
    assert json.loads(campaign.read_text())["active_runs"] == {}


@pytest.mark.docker
def test_dead_runs_custody_refuses_until_reconciled_live_runs_share(
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
        assert campaign_command(["reconcile", campaign.location, "--run", str(crashed_root)]) == 0
        campaign.admit_run("next", tmp_path / "next", os.getpid())
        assert set(campaign.snapshot().active_runs) == {"live-a", "live-b", "next"}
    finally:
        live_b.kill()
        live_b.wait()


# ------------------------------------------------------------------ issue 23, item 2


def test_issue23_item2_a_resume_of_the_dead_run_takes_its_custody_over(
    make_campaign: MakeCampaign, tmp_path: Path
) -> None:
    """The killed run left a task in flight (its sandbox kept for a reattach): another run
    is refused, naming the resume; the resume of that very run is admitted and takes the
    custody over; re-running the instance converts the hold; the task is charged once."""
    campaign = make_campaign(100.0)
    crashed, crashed_root = _crash_a_run(campaign, tmp_path)
    with pytest.raises(RefusalError) as refused:
        campaign.admit_run("other", tmp_path / "other", os.getpid())
    assert refused.value.reason == "campaign_stale_run"
    assert f"--resume-from {crashed_root}" in str(refused.value)

    resume = campaign.admit_run("resume", tmp_path / "resume", os.getpid(),
                                resumes=[str(crashed_root)])
    assert resume.took_over == [crashed] and set(resume.inherited) == {"b/in-flight"}
    state = campaign.snapshot()
    assert set(state.active_runs) == {"resume"}
    assert state.outstanding_usd == 2.0  # the task in flight is still held for
    assert state.runs[-1].run_id == crashed and state.runs[-1].outcome == "taken_over"
    assert state.runs[-1].taken_over_by == "resume" and state.runs[-1].settled_usd == 0.0

    held = campaign.reserve("resume", "b/in-flight", 0.0)  # the reattach
    assert held.amount_usd == 2.0 and campaign.snapshot().outstanding_usd == 2.0
    # the task's whole cost
    campaign.settle("resume", "b/in-flight", 0.5, True, reattached=True)
    record = campaign.finish_run("resume", "completed")
    state = campaign.snapshot()
    assert state.active_runs == {} and state.spent_usd == 0.5 and state.settled_usd == 0.5
    assert record.took_over == [crashed]
    campaign.admit_run("other", tmp_path / "other", os.getpid())  # nothing stale now


def test_a_resume_that_does_not_reattach_pays_the_dead_attempt_and_its_own(
    make_campaign: MakeCampaign, tmp_path: Path
) -> None:
    """Before: the taken-over hold was folded into the new reservation whatever happened,
    so an instance run afresh (no reattach: another agent kind, or the kept sandbox gone)
    was charged only the new attempt's cost, and the dead attempt's spend was lost."""
    campaign = make_campaign(100.0)
    _crashed, crashed_root = _crash_a_run(campaign, tmp_path)  # held 2.0 for b/in-flight
    campaign.admit_run("resume", tmp_path / "resume", os.getpid(), resumes=[crashed_root])
    campaign.reserve("resume", "b/in-flight", 1.0)
    settled = campaign.settle("resume", "b/in-flight", 0.5, True)  # a fresh attempt
    assert settled.charged_usd == 0.5 and settled.earlier_charged_usd == 2.0
    # what the dead attempt's task reported once settled counts when larger than its hold
    campaign.reserve("resume", "b/other", 0.0)
    campaign.settle("resume", "b/other", 0.25, True)
    record = campaign.finish_run("resume", "completed")
    assert record.settled_usd == 2.75 and record.unknown_cost_count == 1
    assert campaign.snapshot().spent_usd == 2.75


def test_a_resume_takes_over_the_hold_of_a_retry_in_flight_as_its_instances(
    make_campaign: MakeCampaign, tmp_path: Path
) -> None:
    """The killed run was retrying ``b/x`` (``--retry-infra``): its first try settled, the
    retry held on ``b/x#retry1``. The resume's try of ``b/x`` takes that hold over, as any
    dead attempt's: reattached to the retry's task, the task is charged once (before, the
    hold stayed apart and was charged again at the run's end); not reattached, the dead
    retry counts what its task reported when above its hold (before: its hold only)."""
    campaign = make_campaign(100.0)
    _crashed, crashed_root = _crash_a_run(
        campaign, tmp_path, settled=(("b/x", 0.5),), in_flight=try_key("b/x", 1)
    )
    resume = campaign.admit_run("resume", tmp_path / "resume", os.getpid(),
                                resumes=[crashed_root])  # fmt: skip
    assert set(resume.inherited) == {"b/x"}
    assert campaign.reserve("resume", "b/x", 0.0).amount_usd == 2.0  # the reattach
    campaign.settle("resume", "b/x", 0.75, True, reattached=True)  # the retry's whole task
    record = campaign.finish_run("resume", "completed")
    assert record.abandoned_count == 0 and record.unknown_cost_count == 0
    assert campaign.snapshot().spent_usd == 0.5 + 0.75

    _crashed, crashed_root = _crash_a_run(
        campaign, tmp_path, settled=(("b/y", 0.5),), in_flight=try_key("b/y", 1)
    )
    campaign.admit_run("resume2", tmp_path / "resume2", os.getpid(), resumes=[crashed_root])
    campaign.reserve("resume2", "b/y", 1.0)
    settled = campaign.settle("resume2", "b/y", 0.25, True, earlier_cost_usd=3.0)  # afresh
    assert settled.earlier_charged_usd == 3.0  # what the dead retry's task reported
    campaign.finish_run("resume2", "completed")
    assert campaign.snapshot().spent_usd == 1.25 + 0.5 + 0.25 + 3.0


def test_try_keys_name_their_instance() -> None:
    assert try_key("b/x@2", 0) == "b/x@2" and try_key("b/x@2", 3) == "b/x@2#retry3"
    assert instance_of("b/x@2#retry3") == instance_of("b/x@2") == "b/x@2"


def test_a_dead_attempts_hold_is_charged_when_its_instance_does_not_run_again(
    make_campaign: MakeCampaign, tmp_path: Path
) -> None:
    campaign = make_campaign(100.0)
    _crashed, crashed_root = _crash_a_run(campaign, tmp_path)
    campaign.admit_run("resume", tmp_path / "resume", os.getpid(), resumes=[crashed_root])
    campaign.reserve("resume", "b/in-flight", 1.0)
    campaign.release("resume", "b/in-flight")  # e.g. its sandbox could not be made
    assert campaign.snapshot().spent_usd == 2.0
    # what the dead attempt's task reported, once settled, counts when above its hold
    _second, second_root = _crash_a_run(campaign, tmp_path)
    campaign.admit_run("again", tmp_path / "again", os.getpid(), resumes=[second_root])
    campaign.reserve("again", "b/in-flight", 0.0)
    assert campaign.settle("again", "b/in-flight", 0.1, True,
                           earlier_cost_usd=3.0).earlier_charged_usd == 3.0


def test_issue23_item2_a_hold_the_resume_never_reran_is_charged_at_its_end(
    make_campaign: MakeCampaign, tmp_path: Path
) -> None:
    campaign = make_campaign(100.0)
    _crashed, crashed_root = _crash_a_run(campaign, tmp_path)
    campaign.admit_run("resume", tmp_path / "resume", os.getpid(), resumes=[crashed_root])
    record = campaign.finish_run("resume", "completed")
    assert record.abandoned_count == 1 and record.unknown_cost_count == 1
    assert campaign.snapshot().spent_usd == 2.0  # unknown: never $0


def test_issue23_item2_a_chain_of_resumes_takes_every_dead_ancestor_over(
    make_campaign: MakeCampaign, tmp_path: Path
) -> None:
    campaign = make_campaign(100.0)
    first, first_root = _crash_a_run(campaign, tmp_path)
    second_root = tmp_path / "second"
    # the second attempt (a resume of the first) dies too
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    campaign.admit_run("second", second_root, holder.pid, resumes=[first_root])
    holder.kill()
    holder.wait()
    third = campaign.admit_run("third", tmp_path / "third", os.getpid(),
                               resumes=[second_root, first_root])
    assert third.took_over == ["second", first] and set(third.inherited) == {"b/in-flight"}
    assert third.custody_run_ids == ["third", "second", first]


def _dead_resume(campaign: Campaign, root: Path, resumes: list[Path],
                 settle: str | None = None) -> None:
    """A resume of ``resumes`` admitted (it takes their custody over), then killed; it
    settles ``settle`` first when given (a resume that ran a unit)."""
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    campaign.admit_run(root.name, root, holder.pid, resumes=resumes)
    if settle is not None:
        campaign.reserve(root.name, settle, 1.0)
        campaign.settle(root.name, settle, 0.5, True)
    holder.kill()
    holder.wait()


def test_a_resume_killed_while_admitted_passes_its_custody_on_to_the_next(
    make_campaign: MakeCampaign, tmp_path: Path
) -> None:
    """A resume SIGKILLed after it took the dead run's custody over but before its
    selection was frozen cannot itself be resumed: the operator resumes the dead run again,
    and that resume takes both over (the holds pass on; before, it was refused as stale)."""
    campaign = make_campaign(100.0)
    first, first_root = _crash_a_run(campaign, tmp_path)
    _dead_resume(campaign, tmp_path / "lost", [first_root])
    again = campaign.admit_run("again", tmp_path / "again", os.getpid(), resumes=[first_root],
                               resumed_run_ids=[first])
    assert again.took_over == ["lost", first] and set(again.inherited) == {"b/in-flight"}
    lost = next(r for r in campaign.snapshot().runs if r.run_id == "lost")
    assert lost.outcome == "taken_over" and lost.taken_over_by == "again"


def test_a_resume_of_a_finished_run_killed_while_admitted_stays_no_obstacle(
    make_campaign: MakeCampaign, tmp_path: Path
) -> None:
    """The run finished; its resume died while it was admitted (it held nothing): the next
    resume of the same run takes that entry over instead of being refused as stale."""
    campaign = make_campaign(100.0)
    done_root = tmp_path / "done"
    campaign.admit_run("done", done_root, os.getpid())
    campaign.finish_run("done", "completed")
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    campaign.admit_run("lost", tmp_path / "lost", holder.pid, resumes=[done_root],
                       resumed_run_ids=["done"])
    holder.kill()
    holder.wait()
    again = campaign.admit_run("again", tmp_path / "again", os.getpid(), resumes=[done_root],
                               resumed_run_ids=["done"])
    assert again.took_over == ["lost"]  # (it took one over: ``resumes`` is not written)
    assert set(campaign.snapshot().active_runs) == {"again"}
    lost = next(r for r in campaign.snapshot().runs if r.run_id == "lost")
    assert lost.outcome == "taken_over" and lost.taken_over_by == "again"


def test_a_resume_that_ran_a_unit_is_a_fork_and_still_refuses_its_ancestors_resume(
    make_campaign: MakeCampaign, tmp_path: Path
) -> None:
    campaign = make_campaign(100.0)
    _first, first_root = _crash_a_run(campaign, tmp_path)
    _dead_resume(campaign, tmp_path / "ran", [first_root], settle="a/done")
    with pytest.raises(RefusalError) as refused:
        campaign.admit_run("again", tmp_path / "again", os.getpid(), resumes=[first_root])
    assert refused.value.reason == "campaign_stale_run" and "ran" in str(refused.value)


@pytest.mark.docker
def test_issue23_item2_reconcile_names_the_kept_sandbox_and_each_way_out(
    make_campaign: MakeCampaign,
    tmp_path: Path,
    docker_client: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from harness.sandbox.images.build import base_recipe, ensure_image

    image = ensure_image(base_recipe(), client=docker_client).image_id
    campaign = make_campaign(100.0)
    crashed, crashed_root = _crash_a_run(campaign, tmp_path)
    manifest = {"run_id": crashed, "benchmarks": ["programbench"]}
    (crashed_root / "run_manifest.json").write_text(json.dumps(manifest))
    kept = docker_client.containers.run(
        image, ["sleep", "600"], detach=True, name=f"{crashed}-kept",
        labels={"harness.run": crashed, "harness.reattach": "gateway",
                "harness.instance": "testorg__calculator", "harness.ttl_s": "600"})
    argv = ["reconcile", campaign.location, "--run", str(crashed_root)]
    try:
        assert campaign_command(argv) == 2
        err = capsys.readouterr().err
        assert "refused (sandboxes_kept)" in err and f"{crashed}-kept" in err, err
        assert "instance testorg__calculator" in err and "TTL ends" in err
        flag = "--campaign-file" if campaign.backend.kind == "file" else "--campaign-url"
        assert (f"pytest benchmarks/programbench --resume-from {crashed_root} "
                f"{flag} {campaign.location}") in err
        assert "the paid task continues" in err
        assert f"harness sweep --run {crashed}" in err and "spend so far is lost" in err
        assert "wait until the TTL ends" in err
        assert crashed in campaign.snapshot().active_runs  # nothing changed
    finally:
        kept.remove(force=True)
    assert campaign_command(argv) == 0


# ------------------------------------------------------------------ issue 23, item 7


def test_issue23_item7_the_session_end_proof_asks_every_engine_the_run_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``--docker-host`` naming other engines, the custody proof queries each of them
    (and the local one), for the run and the runs it took over: a network left on the second
    engine keeps the custody unsettled."""
    from harness.budget import reconcile
    from harness.runner import budget_plugin as plugin
    from harness.sandbox import engines
    from harness.sandbox.labels import mark_docker_used

    root = tmp_path / "run"
    root.mkdir()
    mark_docker_used(root)
    engines.write_engines(root, [
        engines.EngineRecord(url="local", index=0),
        engines.EngineRecord(url="unix:///second.sock", index=1)])
    asked: list[tuple[str, str]] = []

    class Client:
        def __init__(self, url: str) -> None:
            self.url = url

        def close(self) -> None:
            pass

    def left(run_id: str, client: Any = None) -> dict[str, list[str]]:
        url = "local" if client is None else client.url
        asked.append((run_id, url))
        on_second = url != "local" and run_id == "r2"
        return {"containers": [], "networks": [f"{run_id}-net"] if on_second else [],
                "kept": []}

    monkeypatch.setattr(reconcile, "resources_left", left)
    monkeypatch.setattr(engines, "client_for", Client)
    why = plugin.cleanup_unproven("r2", root, took_over=["r1"])
    assert sorted(asked) == [("r1", "local"), ("r1", "unix:///second.sock"),
                             ("r2", "local"), ("r2", "unix:///second.sock")]
    assert why is not None and "r2-net (on unix:///second.sock)" in why


@pytest.mark.docker
def test_issue23_item7_the_custody_proof_finds_a_leftover_on_the_second_engine(
    tmp_path: Path, second_engine: Engine
) -> None:
    """A run over ``--docker-host`` engines: a network of the run left on the second engine
    (a real second dockerd) keeps the custody unsettled; before, only the default engine
    was asked and the custody settled."""
    from harness.runner.budget_plugin import cleanup_unproven
    from harness.sandbox import engines
    from harness.sandbox.labels import mark_docker_used

    run_id = f"engines-{uuid.uuid4().hex[:8]}"
    root = tmp_path / "run"
    root.mkdir()
    mark_docker_used(root)
    engines.write_engines(root, [engines.EngineRecord(url=second_engine.url, index=0)])
    client = second_engine.client()
    network = client.networks.create(f"{run_id}-net", internal=True,
                                     labels={"harness.run": run_id})
    try:
        why = cleanup_unproven(run_id, root)
        assert why is not None and f"{run_id}-net (on {second_engine.url})" in why, why
    finally:
        network.remove()
        client.close()
    assert cleanup_unproven(run_id, root) is None
