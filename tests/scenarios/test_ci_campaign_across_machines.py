"""Scenario (issue 44): a paid campaign launched from the CI workflow's own jobs, across
machines, with two of them lost.

Each "runner" is a process tree of its own (the workflow's shard step, played by
:mod:`tests.support.ci_workflow` from ``.github/workflows/benchmark.yml``) with its own
folder and host identity (``HARNESS_HOST_ID``); nothing is shared but the campaign in a real
PostgreSQL server and the artifact folder. The agent is the gateway agent: the reference
agent server, started on each runner by the shard step (``agent_command``), one paid step
of $0.50 per task. The meter is the FAKE file meter, a thread of this test playing the
provider (the key's usage: the sum of every server's task costs). ProgramBench's three
fixture tasks, two attempts each, ``shards: 2``, ``workers: 2``.

The tasks are the three fixture tasks under ids the official package takes
(:mod:`tests.benchmarks.programbench.lb_overlay`).

1. Both shards start. While they work, ``harness campaign reconcile --lost`` of a live
   shard is refused in one line (its lease runs).
2. Shard 2 is SIGKILLed mid-task; its run root is packed and kept as its artifact (the
   workflow's `if: always()` steps). Shard 1's machine vanishes with its run root (no artifact).
3. Once shard 1's lease expired, ``reconcile --lost`` settles it from the campaign's records
   (its open holds charged as unknown spend).
4. The re-run: shard 2 on a new machine resumes its artifact and takes its custody over
   (after the dead lease expired); shard 1 on another runs afresh.
5. The merge job unpacks the artifacts on its own machine (every machine's folder is gone
   by then: the chains are found by name) and runs ``scripts/ci/merge.sh``: merge, gate,
   report, the official package and its verify.

Asserted: spend counted once (the campaign's spent is the meter's or the settlements',
each paid attempt settled once, each dead one at its hold), no unit paid twice (the units
shard 2 settled before the kill are carried, never submitted again), the ceiling held at
every sample across both shards, reconcile refused the live shard and settled the lost
one, and the final package verifies.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest
import yaml

from benchmarks.programbench.fixture_tasks import ORACLE_SCORES
from harness.budget import Campaign
from harness.testing.fake_model_server import start_fake_model_server
from tests.agents.agents_support import free_port
from tests.agents.model_scripts import solve_script
from tests.benchmarks.programbench.lb_overlay import Overlay, build_overlay, tagged
from tests.budget.pg_support import PgServer, serving
from tests.support.ci_workflow import (
    ROOT,
    agent_checkout,
    base_ctx,
    plan,
    run_job,
    spawn_job,
    workspace,
)
from tests.support.suite import run_cli, wait_for

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.postgres]

TASK_COST = 0.5
HOLD = 5.0  # the workflow's default unknown_cost_usd: what each instance in flight holds
CEILING = 100.0  # the workflow's default budget_usd
LEASE_SEC = 6
FIXTURE_TASKS = sorted(ORACLE_SCORES)
KILLED, LOST = 2, 1  # shard 2 holds two tasks (4 units), shard 1 one (2 units)
BASELINE = 10.0


@pytest.fixture(scope="module")
def pg_server() -> Iterator[PgServer]:
    yield from serving()


class Provider:
    """The FAKE provider's billing: the key's usage is the baseline plus every task's cost on
    every agent server it was told of (a dead server's last total stays counted)."""

    def __init__(self, meter: Path) -> None:
        self.meter = meter
        self.totals: dict[str, float] = {}
        self.urls: list[str] = []
        self.halt = threading.Event()
        meter.write_text(json.dumps({"usage": BASELINE}))
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self) -> None:
        while not self.halt.wait(0.1):
            for url in list(self.urls):
                try:
                    tasks = httpx.get(f"{url}/api/state", timeout=2, trust_env=False).json()
                    self.totals[url] = sum(
                        httpx.get(f"{url}/api/tasks/{t}", timeout=2, trust_env=False).json()
                        .get("accounted_upper_bound_usd") or 0.0 for t in tasks["tasks"])
                except (httpx.HTTPError, ValueError, KeyError):
                    continue  # a server that died (its machine): its last total stands
            tmp = self.meter.with_suffix(".tmp")
            tmp.write_text(json.dumps({"usage": BASELINE + sum(self.totals.values())}))
            os.replace(tmp, self.meter)

    def stop(self) -> None:
        self.halt.set()
        self.thread.join()


class Sampler:
    """Samples the campaign while the shards run: the highest spent + outstanding seen."""

    def __init__(self, campaign: Campaign) -> None:
        self.campaign = campaign
        self.peak = 0.0
        self.samples = 0
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self) -> None:
        while not self.halt.wait(0.2):
            state = self.campaign.snapshot()
            self.peak = max(self.peak, state.spent_usd + state.outstanding_usd)
            self.samples += 1

    def stop(self) -> None:
        self.halt.set()
        self.thread.join()


def server_config(folder: Path, sleep_s: float) -> Path:
    """One paid step that works ``sleep_s``, then a program that builds nothing."""
    config = folder / "agent-server.json"
    steps: list[dict[str, Any]] = [
        {"run": "true", "sleep_s": sleep_s, "cost_usd": TASK_COST, "prompt_tokens": 1000,
         "completion_tokens": 100},
        {"write": {"path": "compile.sh", "content": "#!/bin/sh\nexit 0\n", "mode": 0o755}}]
    config.write_text(json.dumps({"default_plan": {"steps": steps}, "docker_user": "agent"}))
    return config


class Machine:
    """A runner: its folder (its workspace: run roots, downloaded artifacts), its host
    identity, its agent server's port, and the workflow's attempt it runs."""

    def __init__(self, tmp: Path, name: str, sleep_s: float, attempt: int) -> None:
        self.name = name
        self.sleep_s = sleep_s
        self.attempt = attempt
        self.dir = tmp / name
        self.dir.mkdir()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        command = (f"python3 -m harness.agents.reference_server.server --port {self.port} "
                   f"--config {server_config(self.dir, self.sleep_s)}")
        return {"HARNESS_HOST_ID": f"runner-{self.name}", **workspace(self.dir),
                "AGENT_COMMAND": command, "GATEWAY_URL": self.url,
                "GITHUB_REPOSITORY": "team/bench", "GITHUB_RUN_ID": "4242",
                "GITHUB_RUN_ATTEMPT": str(self.attempt)}

    def root(self, shard: int) -> Path:
        return self.dir / "runs" / f"shard-{shard}-4242-{self.attempt}"

    def download(self, artifacts: Path, shard: int) -> None:
        """The shard's artifact of this workflow run, as download-artifact puts it."""
        found = artifacts / f"run-shard-{shard}"
        if found.is_dir():
            shutil.copytree(found, self.dir / "earlier" / "2-this-run")


def rows(root: Path) -> list[dict[str, Any]]:
    path = root / "result_index.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def in_flight(root: Path) -> int:
    return len(list(root.glob("programbench/*/task_checkpoint.json")))


def run_id(root: Path) -> str:
    return str(json.loads((root / "run_manifest.json").read_text())["run_id"])


def upload(workflow: dict[str, Any], ctx: dict[str, Any], env: dict[str, str], shard: int,
           machine: Machine, artifacts: Path) -> None:
    """The shard job's `if: always()` steps: pack the run roots, upload the tar (replacing
    the artifact of an earlier attempt)."""
    [packed] = run_job(workflow, "shard", ctx, cwd=ROOT, env_override=env,
                       only=lambda step: str(step.get("name", "")).startswith("Pack"))
    assert packed.returncode == 0, packed.stdout + packed.stderr
    folder = artifacts / f"run-shard-{shard}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    shutil.copyfile(machine.dir / "runs" / f"shard-{shard}.tar", folder / f"shard-{shard}.tar")


def engine_gone(run: str) -> None:
    """A runner's engine goes with its machine: on CI each runner has its own. Here they
    share one, so what the killed run left on it (kept sandboxes, networks) is removed."""
    client = docker.from_env()
    label = {"label": f"harness.run={run}"}
    for c in client.containers.list(all=True, filters=label):
        c.remove(force=True)
    for n in client.networks.list(filters=label):
        n.remove()


def kill(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def finish(proc: subprocess.Popen[bytes], log: Path) -> None:
    try:
        rc = proc.wait(timeout=900)
    except subprocess.TimeoutExpired:
        kill(proc)
        raise AssertionError(log.read_text()[-4000:]) from None
    assert rc == 0, log.read_text()[-4000:]


@pytest.fixture(scope="module")
def overlay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Overlay]:
    """The three fixture tasks under ids the official package takes (``harnessfix__``)."""
    built = build_overlay(tmp_path_factory.mktemp("overlay"), FIXTURE_TASKS)
    with tagged(FIXTURE_TASKS):
        yield built


@dataclass
class World:
    """The campaign the test plays: the workflow, its runners, what they share."""

    workflow: dict[str, Any]
    ctx: dict[str, Any]
    url: str
    common: dict[str, str]
    campaign: Campaign
    artifacts: Path
    first: dict[int, Machine]
    rerun: dict[int, Machine]
    started: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    again: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    contexts: dict[tuple[int, str], dict[str, Any]] = field(default_factory=dict)

    def context(self, shard: int, machine: Machine) -> dict[str, Any]:
        """The runner's own copy of the expressions' context (its steps' outputs)."""
        return self.contexts.setdefault(
            (shard, machine.name), {**copy.deepcopy(self.ctx), "matrix": {"shard": shard}})

    def spawn(self, shard: int, machine: Machine) -> subprocess.Popen[bytes]:
        return spawn_job(self.workflow, "shard", self.context(shard, machine), cwd=ROOT,
                         log=machine.dir / "job.log", work="Run shard",
                         env_override={**self.common, **machine.env()})

    def upload(self, shard: int, machine: Machine) -> None:
        upload(self.workflow, self.context(shard, machine), {**self.common, **machine.env()},
               shard, machine, self.artifacts)

    def reconcile_lost(self, run: str) -> subprocess.CompletedProcess[str]:
        return run_cli("campaign", "reconcile", "env:HARNESS_CAMPAIGN_URL", "--lost", run,
                       env={"HARNESS_CAMPAIGN_URL": self.url, **self.common})


@dataclass(frozen=True)
class Killed:
    """What the kill left: the two runs, their open holds, what was settled before it."""

    killed_id: str
    lost_id: str
    open_killed: int
    open_lost: int
    settled_before_kill: set[str]


def start_and_refuse_the_live_one(w: World) -> None:
    """1. Both shards start; reconcile of a live one is refused in one line."""
    for shard, m in w.first.items():
        w.started[shard] = w.spawn(shard, m)
    killed, lost = w.first[KILLED].root(KILLED), w.first[LOST].root(LOST)

    def working() -> bool:
        for shard, proc in w.started.items():
            assert proc.poll() is None, (w.first[shard].dir / "job.log").read_text()[-4000:]
        return (bool(rows(killed)) and in_flight(killed) > len(rows(killed))
                and in_flight(lost) > 0 and not rows(lost))

    wait_for(working, timeout=600, interval=0.2)
    live = w.reconcile_lost(run_id(lost))
    assert live.returncode == 2
    [line] = live.stderr.strip().splitlines()
    assert "refused (campaign_lease_live)" in line and "runner-b" in line


def kill_one_and_lose_the_other(w: World) -> Killed:
    """2. One shard killed mid-task, its run roots uploaded (`if: always()`); the other's
    machine lost with its run root; their engines go with them."""
    killed, lost = w.first[KILLED].root(KILLED), w.first[LOST].root(LOST)
    kill(w.started[KILLED])
    kill(w.started[LOST])
    held = w.campaign.snapshot().active_runs
    found = Killed(run_id(killed), run_id(lost), len(held[run_id(killed)].reservations),
                   len(held[run_id(lost)].reservations),
                   {r["instance_id"] for r in rows(killed) if r["outcome"] == "scored"})
    assert found.open_killed >= 1 and found.open_lost >= 1, held
    w.upload(KILLED, w.first[KILLED])
    for m in w.first.values():
        shutil.rmtree(m.dir / "runs")
    engine_gone(found.killed_id)
    engine_gone(found.lost_id)
    return found


def rerun_elsewhere(w: World, provider: Provider) -> tuple[float, str]:
    """4. The re-runs on other machines: the killed shard resumes its artifact (its custody
    taken over), the lost one runs afresh; each uploads, and its machine goes. Returns what
    the killed shard's re-run paid and its run id."""
    for shard, m in w.rerun.items():
        m.download(w.artifacts, shard)
        w.again[shard] = w.spawn(shard, m)
    for shard, m in w.rerun.items():
        finish(w.again[shard], m.dir / "job.log")
    time.sleep(0.5)  # the provider's last look at the servers
    paid = provider.totals.get(w.rerun[KILLED].url, 0.0)
    rerun_id = run_id(w.rerun[KILLED].root(KILLED))
    for shard, m in w.rerun.items():
        w.upload(shard, m)
        shutil.rmtree(m.dir / "runs")
        shutil.rmtree(m.dir / "earlier", ignore_errors=True)
    return paid, rerun_id


def merge_gate_report_package(w: World, tmp_path: Path) -> Path:
    """5. Merge, gate, report and the official package with its verify."""
    out = tmp_path / "merged"
    merging = {**workspace(tmp_path / "merge"), "EARLIER_DIR": str(w.artifacts)}
    results = run_job(w.workflow, "merge", w.ctx, cwd=ROOT, env_override={
        **w.common, **merging, "SHARDS_DIR": merging["RUNS_DIR"], "OUT": str(out)})
    assert results and all(r.returncode == 0 for r in results), \
        [(r.stdout[-2000:], r.stderr[-2000:]) for r in results]
    assert "merged 2 shards of 2: 6 units" in results[-1].stdout
    manifest = json.loads((out / "run_manifest.json").read_text())
    assert manifest["reportable"] is True, manifest.get("not_reportable")
    assert (out / "report" / "report.html").is_file()
    assert (tmp_path / "merged-submission" / "submission.yaml").is_file()
    return out


def the_world(tmp_path: Path, pg_server: PgServer, overlay: Overlay, meter: Path) -> World:
    url = pg_server.url("ci-campaign", tcp=True)
    campaign = Campaign.open_or_create(pg_server.url("ci-campaign"), ceiling_usd=CEILING,
                                       key_fingerprint="none", baseline_usage=0.0)
    extra = ("-p harness.testing.fake_meter --no-report --harness-progress off "
             f"--gateway-poll-sec 0.2 --custody-lease-sec {LEASE_SEC} --meter-poll-sec 0.5 "
             "--meter-read-timeout-sec 1 --meter-blindness-sec 30")
    workflow, ctx = base_ctx(agent="gateway", solve_model="", select="harnessfix",
                             attempts="2", shards="2", workers="2", task_timeout_min="10",
                             meter=f"fake-file:{meter}", extra_args=extra)
    ctx["secrets"]["HARNESS_CAMPAIGN_URL"] = url
    common = {"PGPASSWORD": pg_server.password, **overlay.variables(),
              **agent_checkout(tmp_path, "reference-1.0.0")}
    plan(workflow, ctx, env_override=common)
    assert ctx["needs"]["plan"]["count"] == "2"
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    # the killed shard's first machine (a) is fast, the lost one's (b) slow: its tasks are
    # still in flight when it vanishes; c and d run the re-runs (the workflow's attempt 2)
    first = {KILLED: Machine(tmp_path, "a", 4.0, 1), LOST: Machine(tmp_path, "b", 120.0, 1)}
    rerun = {KILLED: Machine(tmp_path, "c", 4.0, 2), LOST: Machine(tmp_path, "d", 4.0, 2)}
    return World(workflow, ctx, url, common, campaign, artifacts, first, rerun)


def test_a_paid_campaign_across_machines_loses_two_runners_and_pays_once(
        tmp_path: Path, pg_server: PgServer, overlay: Overlay) -> None:
    meter = tmp_path / "fake_meter_usage.json"
    provider = Provider(meter)
    w = the_world(tmp_path, pg_server, overlay, meter)
    provider.urls += [m.url for m in (*w.first.values(), *w.rerun.values())]
    sampler = Sampler(w.campaign)
    try:
        start_and_refuse_the_live_one(w)
        k = kill_one_and_lose_the_other(w)
        # 3. the lost runner settled from the campaign's records once its lease expired
        time.sleep(LEASE_SEC + 1)
        settle = w.reconcile_lost(k.lost_id)
        assert settle.returncode == 0, settle.stderr
        assert (f"{k.open_lost} open reservation(s) charged as unknown spend at the hold, "
                f"${k.open_lost * HOLD:,.4f}") in settle.stdout
        paid_on_rerun, rerun_id = rerun_elsewhere(w, provider)
    finally:
        sampler.stop()
        provider.stop()
        for proc in [*w.started.values(), *w.again.values()]:
            if proc.poll() is None:
                kill(proc)
    out = merge_gate_report_package(w, tmp_path)

    # custody: the killed shard taken over by its re-run on another machine, the lost one
    # reconciled
    state = w.campaign.snapshot()
    assert state.active_runs == {}
    runs = {r.run_id: r for r in state.runs}
    assert runs[k.killed_id].outcome == "taken_over"
    assert runs[k.killed_id].taken_over_by == rerun_id
    assert runs[k.lost_id].reconciled is True
    # no unit paid twice: what the killed shard settled before its kill is carried
    assert paid_on_rerun == pytest.approx(TASK_COST * (4 - len(k.settled_before_kill)))
    # spend counted once: every final unit at its price once, each dead attempt at its hold
    final = rows(out)
    assert len(final) == 6 and all(r["cost_usd"] == TASK_COST for r in final)
    carried = {r["instance_id"] for r in final if r["outcome"] == "carried_forward"}
    assert carried == k.settled_before_kill  # carried, never run again
    assert {r["outcome"] for r in final} <= {"scored", "carried_forward"}
    assert state.settled_usd == pytest.approx(
        6 * TASK_COST + (k.open_killed + k.open_lost) * HOLD)
    metered = json.loads(meter.read_text())["usage"] - BASELINE
    assert state.spent_usd == pytest.approx(max(metered, state.settled_usd))
    # the ceiling held across both shards at every sample
    assert sampler.samples > 10 and sampler.peak <= CEILING


def test_the_workflow_defaults_run_a_paid_campaign(tmp_path: Path, pg_server: PgServer) -> None:
    """Every input at its default (mini-swe-agent on the pinned model, no meter with the
    unknown-cost allowance, the per-task limit, the image ceiling, this checkout as the agent
    repo) but the selection and the FAKE provider: a paid shard is admitted, runs, is scored
    by the official eval and settles in the campaign; no refusal."""
    server = start_fake_model_server(solve_script())
    config = tmp_path / "mini.yaml"
    config.write_text(yaml.safe_dump({"model": {"model_kwargs": {"api_base": server.base_url}}}))
    workflow, ctx = base_ctx(select="calculator",
                             extra_args=f"--pb-fixtures --agent-config {config} --no-report")
    url = pg_server.url("ci-defaults", tcp=True)
    ctx["secrets"]["HARNESS_CAMPAIGN_URL"] = url
    try:
        plan(workflow, ctx)
        assert ctx["needs"]["plan"]["count"] == "1"
        ctx["matrix"] = {"shard": 1}
        root = tmp_path / "shard-1"
        results = run_job(workflow, "shard", ctx, cwd=ROOT, env_override={
            "RUN_ROOT": str(root), "PGPASSWORD": pg_server.password,
            **agent_checkout(tmp_path), **workspace(tmp_path)})
    finally:
        server.stop()
    assert results[-1].returncode == 0, results[-1].stdout[-3000:] + results[-1].stderr[-3000:]
    manifest = json.loads((root / "run_manifest.json").read_text())
    assert manifest["outcome"] == "completed" and manifest["reportable"] is True, manifest
    [row] = rows(root)
    # the default price table prices the default model: the loop ran to its end, its cost
    # known (an unpriced call would have stopped it at the first, per_task_limit_reached)
    assert row["outcome"] == "scored" and row["official_eval_status"] == "completed", row
    assert row["cost_usd"] is not None and row["cost_usd"] > 0, row
    state = Campaign.open(pg_server.url("ci-defaults")).snapshot()
    assert state.active_runs == {} and state.runs[-1].outcome == "completed"
    assert state.ceiling_usd == CEILING and state.runs[-1].unknown_cost_allowance_usd == HOLD
    assert state.runs[-1].settled_count == 1
