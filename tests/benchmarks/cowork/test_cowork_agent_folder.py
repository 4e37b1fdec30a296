"""Issue 23 item 3: Cowork's gateway agent keeps its checkpoint and copied events in
``<instance>/runner_agent/``; the orphan cancel on resume and the paid-activity evidence
must look there too. Real HTTP against the reference agent server on 127.0.0.1 (its plan
runs locally: no Docker); Cowork's trial steps (:class:`CoworkSteps`: ``agent_request``,
then the runner's ``run_agent``, then ``agent_done``, the trial's order) make the request.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from benchmarks.cowork_bench import BENCHMARK
from benchmarks.cowork_bench import models as m
from benchmarks.cowork_bench.classify import classify_instance, paid_activity
from benchmarks.cowork_bench.instance import InstanceResult
from benchmarks.cowork_bench.phases import AgentPhase
from benchmarks.cowork_bench.steps import STATE, CoworkSteps, Life
from harness.agents.base import AgentRequest
from harness.agents.gateway.agent import GatewayAgent
from harness.agents.gateway.body import validate_task_body
from harness.agents.gateway.checkpoint import AgentFolder, read_checkpoint, write_checkpoint
from harness.core.adapter import BenchmarkAdapter, InstanceSpec
from harness.core.errors import InfraError
from harness.core.models import Plan, TaskRow
from harness.core.outcomes import Outcome
from harness.runner.instance import InstanceContext, RunContext
from harness.runner.instance import paid_activity as row_paid_activity
from harness.runner.trial import Trial
from tests.agents.agents_support import FAST, RefServer, start_server, task_body

IID = "gcal-standup-week"
USAGE_STEP = {"run": "true", "cost_usd": 0.25, "prompt_tokens": 100, "completion_tokens": 10}


class _Cowork(BenchmarkAdapter):
    name = BENCHMARK


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RefServer]:
    ref = start_server(tmp_path / "server")
    yield ref
    ref.stop()


def context(root: Path, ancestors: tuple[Path, ...] = ()) -> InstanceContext:
    plan = Plan(run_id=root.name, created_at_unix=time.time(),
                ancestors=[str(a) for a in ancestors])
    run = RunContext(run_id=root.name, run_root=root, worker_id="main", role="single",
                     plan=plan, adapters={})
    return InstanceContext(run, _Cowork(), InstanceSpec(instance_id=IID), f"t[{IID}]")


class _Steps(CoworkSteps):
    options = SimpleNamespace(task_timeout_sec=60)  # type: ignore[assignment]


class _Phase(AgentPhase):
    """The agent phase without its container: nothing to copy out or remove."""

    def close(self) -> Any:
        return None


def step(ctx: InstanceContext, url: str, plan: dict[str, Any], grace_s: float = 2.0
         ) -> Any:
    """Cowork's steps around the gateway agent, as the trial runs them; its body runs
    ``plan`` locally. Called with a timeout, it returns the agent phase's status."""
    from harness.runner.agent_run import run_agent

    body = validate_task_body(task_body(ctx.run_root / "ws", plan, timeout_sec=60))
    agent = GatewayAgent(url, policy=FAST.model_copy(update={"client_grace_s": grace_s}))
    steps = _Steps()
    config = SimpleNamespace(getoption=lambda name, default=None: default)
    trial = Trial(ctx, SimpleNamespace(config=config), "gateway")  # type: ignore[arg-type]
    box = SimpleNamespace(name="harness-agent-container", id="0" * 64, client=None,
                          spec=SimpleNamespace(user="agent"))
    phase = _Phase(SimpleNamespace(), SimpleNamespace(task_text="",  # type: ignore[arg-type]
                                                      system_prompt=""),
                   container=box)  # type: ignore[arg-type]
    trial.state[STATE] = Life(None, time.monotonic(),  # type: ignore[arg-type]
                              InstanceResult(IID, None, None, None),
                              env=SimpleNamespace(), phase=phase)  # type: ignore[arg-type]

    def run(timeout_s: float) -> str:
        request = steps.agent_request(trial, AgentRequest(
            instance_id=IID, instance_dir=ctx.instance_dir, instruction="do it",
            task_body=body, timeout_sec=timeout_s))
        try:
            outcome = run_agent(ctx, agent, request)
        except BaseException as exc:
            steps.agent_done(trial, None, exc)
            raise
        steps.agent_done(trial, outcome, None)
        return phase.run.status

    return run


def killed_attempt(root: Path, server: RefServer) -> str:
    """An earlier run whose task spent, then kept running (its client gave up, as a killed
    run's would): its checkpoint and events are in ``runner_agent/``."""
    folder = root / BENCHMARK / IID / m.RUNNER_DIR
    agent = GatewayAgent(server.url, policy=FAST.model_copy(update={"client_grace_s": 0.0}))
    outcome = agent.run(AgentRequest(
        instance_id=IID, instance_dir=folder, instruction="x",
        task_body=task_body(root / "ws", {"steps": [USAGE_STEP, {"run": "true",
                                                                 "sleep_s": 60}]},
                            timeout_sec=120),
        timeout_sec=1.0, extra={"keep_sandbox": True}))
    assert outcome.infra and outcome.task_id
    assert server.state()["tasks"][outcome.task_id] == "running"
    return outcome.task_id


def test_a_cowork_resume_cancels_the_task_its_ancestor_left_running_and_records_its_spend(
        tmp_path: Path, server: RefServer) -> None:
    first = killed_attempt(tmp_path / "r1", server)
    ctx = context(tmp_path / "r2", (tmp_path / "r1",))
    runner = step(ctx, server.url, {"steps": [{"run": "true"}]})

    status = runner(30)

    assert status == "success"
    state = server.state()
    assert state["cancels"] == [first] and state["tasks"][first] == "cancelled"
    assert state["submissions"] == 2  # the resume's own task came after the cancel settled
    (orphan,) = ctx.result.details["agent"]["details"]["orphan_tasks"]
    assert (orphan["task_id"], orphan["action"], orphan["status"]) == (first, "cancelled",
                                                                      "cancelled")
    assert orphan["paid_activity"] == "observed" and orphan["prompt_tokens"] == 100
    assert orphan["checkpoint"].endswith(f"r1/{BENCHMARK}/{IID}/{m.RUNNER_DIR}/"
                                         "task_checkpoint.json")
    usage = [json.loads(line) for line in
             (ctx.instance_dir / m.RUNTIME_USAGE).read_text().splitlines()]
    assert {"source": "orphan_task", "task_id": first, "prompt_tokens": 100,
            "cost_usd": 0.25}.items() <= usage[0].items()
    assert paid_activity(ctx.instance_dir) == "observed"


def test_an_orphan_killed_before_its_first_events_copy_still_records_its_cost(
        tmp_path: Path, server: RefServer) -> None:
    """Before: an orphan whose events were never copied (``paid_activity`` unknown) was
    dropped from ``runtime_usage.jsonl`` although its settled result reported a cost."""
    first = killed_attempt(tmp_path / "r1", server)
    folder = tmp_path / "r1" / BENCHMARK / IID / m.RUNNER_DIR
    (folder / "gateway_events.jsonl").unlink()  # killed before the first copy: no events,
    write_checkpoint(folder / "task_checkpoint.json", first, "submitted", None,  # no usage
                     server.url, 0)
    ctx = context(tmp_path / "r2", (tmp_path / "r1",))

    assert step(ctx, server.url, {"steps": [{"run": "true"}]})(30) == "success"

    (orphan,) = ctx.result.details["agent"]["details"]["orphan_tasks"]
    assert orphan["task_id"] == first and orphan["paid_activity"] == "unknown"
    assert orphan["cost_usd"] == 0.25
    usage = [json.loads(line) for line in
             (ctx.instance_dir / m.RUNTIME_USAGE).read_text().splitlines()]
    assert [(u["source"], u["task_id"], u["cost_usd"]) for u in usage] == [
        ("orphan_task", first, 0.25)]


def test_an_orphan_an_earlier_resume_settled_is_not_counted_again(
        tmp_path: Path, server: RefServer) -> None:
    """Before: every ancestor's checkpoint was handed over, so the second resume found the
    orphan the first resume had settled (and recorded) ``already_settled`` and recorded its
    cost a second time."""
    first = killed_attempt(tmp_path / "r1", server)
    ctx2 = context(tmp_path / "r2", (tmp_path / "r1",))
    step(ctx2, server.url, {"steps": [{"run": "true"}]})(30)
    assert [o["task_id"] for o in ctx2.result.details["agent"]["details"]["orphan_tasks"]] == [
        first]
    row = TaskRow(ts_unix=time.time(), run_id="r2", benchmark=BENCHMARK, instance_id=IID,
                  status="infra_failed", outcome=Outcome.INFRA_FAILED,  # run again by r3
                  cost_usd=ctx2.result.cost_usd, cost_known=ctx2.result.cost_known,
                  details=ctx2.result.details)
    (tmp_path / "r2" / "result_index.jsonl").write_text(row.dump_line() + "\n")
    ctx3 = context(tmp_path / "r3", (tmp_path / "r2", tmp_path / "r1"))

    assert step(ctx3, server.url, {"steps": [{"run": "true"}]})(30) == "success"

    own = ctx3.result.details.get("agent", {}).get("details") or {}
    orphans = own.get("orphan_tasks") or []
    assert first not in [o["task_id"] for o in orphans]
    assert not (ctx3.instance_dir / m.RUNTIME_USAGE).exists() or first not in (
        ctx3.instance_dir / m.RUNTIME_USAGE).read_text()


def test_an_interrupted_cowork_gateway_task_proves_its_spend_from_its_events(
        tmp_path: Path, server: RefServer) -> None:
    ctx = context(tmp_path / "r1")
    plan = {"steps": [USAGE_STEP, {"run": "true", "sleep_s": 60}]}
    runner = step(ctx, server.url, plan, grace_s=0.0)

    with pytest.raises(InfraError):  # the client gave up: infrastructure, task cancelled
        runner(1.0)

    events = ctx.instance_dir / m.RUNNER_DIR / "gateway_events.jsonl"
    assert events.is_file()
    assert ctx.result.details["agent"]["paid_evidence"] == "gateway_events_llm_usage"
    assert row_paid_activity(ctx.result) is True  # the row's paid_activity
    assert ctx.result.output_paths["gateway_events"].endswith(f"{m.RUNNER_DIR}/"
                                                              "gateway_events.jsonl")
    # the ledger classification of the folder (no summary: interrupted) sees it too
    assert classify_instance(ctx.instance_dir).details["paid_activity"] == "observed"


def test_a_linked_events_file_proves_nothing(tmp_path: Path) -> None:
    inst = tmp_path / "inst"
    (inst / m.RUNNER_DIR).mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text(json.dumps({"type": "llm_usage", "prompt_tokens": 5}) + "\n")
    os.symlink(elsewhere, inst / m.RUNNER_DIR / "gateway_events.jsonl")
    assert paid_activity(inst) == "unknown"
    (inst / m.RUNNER_DIR / "gateway_events.jsonl").unlink()
    os.mkfifo(inst / m.RUNNER_DIR / "gateway_events.jsonl")
    assert paid_activity(inst) == "unknown"  # a FIFO is never opened


def test_the_agent_folder_names_the_same_files_in_every_run_root(tmp_path: Path) -> None:
    inst = tmp_path / "r2" / BENCHMARK / IID
    folder = AgentFolder.of(inst, inst / m.RUNNER_DIR)
    old = folder.in_run(tmp_path / "r1", BENCHMARK, IID)
    assert old.checkpoint == tmp_path / "r1" / BENCHMARK / IID / m.RUNNER_DIR / \
        "task_checkpoint.json"
    assert folder.events == inst / m.RUNNER_DIR / "gateway_events.jsonl"
    assert AgentFolder.of(inst).checkpoint == inst / "task_checkpoint.json"
    with pytest.raises(ValueError, match="not inside the instance folder"):
        AgentFolder.of(inst, tmp_path / "elsewhere")
    assert read_checkpoint(old.checkpoint) is None
