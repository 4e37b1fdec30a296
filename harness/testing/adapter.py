"""The ``selftest`` benchmark, a test double: instances that do what a test asks.

Its instances come from a JSON file named by ``$HARNESS_SELFTEST_TASKS`` (or the
``--selftest-tasks`` option): a list of ``{"id": ..., "work": ..., ...}`` objects, where
``work`` is one of ``succeed`` (score 1), ``fail`` (score 0), ``partial`` (``score``),
``agent_fail``, ``sleep`` (``seconds``, then the ``then`` work, default ``succeed``),
``crash`` (``os._exit``), ``infra`` (an InfraError with ``reason``), ``raise`` (an
unexpected exception), ``agent`` (:mod:`.agent_task`: a small task in a Docker sandbox
through ``--agent``); ``cost`` is the agent's reported cost in USD. Optional
``difficulty`` and ``language`` become markers; ``count`` expands an entry into N
instances ``<id>-0000`` ... Each execution appends a line to
``<run_root>/selftest_executions.log`` (instance id and pid) so tests can count how often
an instance really ran.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from harness.core.adapter import BenchmarkAdapter, InstanceSpec
from harness.core.errors import InfraError
from harness.core.models import Outcome
from harness.runner.instance import InstanceContext

ENV_TASKS = "HARNESS_SELFTEST_TASKS"
EXECUTIONS = "selftest_executions.log"


class SelftestAdapter(BenchmarkAdapter):
    name = "selftest"
    marker_names = ("difficulty", "language")
    needs_agent = False  # only its ``agent`` work uses one (``--agent``, default nop)
    near_resolved_at = 0.95
    # The self-test's status words (the same as ProgramBench's, so its runs read alike).
    status_vocabulary = {
        Outcome.SCORED: "completed",
        Outcome.AGENT_FAILED: "failed",
        Outcome.INFRA_FAILED: "infra_failed",
        Outcome.BLOCKED: "blocked",
        Outcome.NOT_ATTEMPTED: "blocked",
        Outcome.SKIPPED: "skipped",
        Outcome.CARRIED: "skipped",
        Outcome.DRY_RUN: "skipped",
    }

    def _tasks_file(self, config: pytest.Config) -> Path:
        given = config.getoption("selftest_tasks", None) or os.environ.get(
            ENV_TASKS)
        if not given:
            raise pytest.UsageError(
                f"selftest needs its task list: set ${ENV_TASKS} or --selftest-tasks FILE")
        return Path(given)

    def raw_tasks(self, config: pytest.Config) -> list[dict[str, Any]]:
        data = json.loads(self._tasks_file(config).read_text())
        out: list[dict[str, Any]] = []
        for entry in data:
            count = int(entry.get("count", 0))
            if count:
                for n in range(count):
                    out.append({**entry, "id": f"{entry['id']}-{n:04d}"})
            else:
                out.append(entry)
        return out

    def instances(self, config: pytest.Config) -> list[InstanceSpec]:
        specs = []
        for task in self.raw_tasks(config):
            markers = {k: task[k] for k in self.marker_names if k in task}
            specs.append(InstanceSpec(instance_id=task["id"], markers=markers, data=task))
        return specs

    def version(self) -> str:
        return "selftest-1"

    def needs_engine(self, config: pytest.Config) -> bool:
        """Only its ``agent`` work uses Docker (the rest runs in the worker)."""
        try:
            return any(task.get("work") == "agent" for task in self.raw_tasks(config))
        except (OSError, ValueError, pytest.UsageError):
            return False  # no readable task list: its collection says so, nothing runs

    def result_config(self, config: pytest.Config) -> dict[str, Any]:
        return {"scale": config.getoption("selftest_scale", 1.0)}


def run_selftest_instance(ctx: InstanceContext, request: pytest.FixtureRequest | None = None
                          ) -> None:
    """What a selftest instance does (the body of its one test function)."""
    task: dict[str, Any] = ctx.data
    if task["work"] == "agent":
        if request is None:
            raise ValueError("selftest work 'agent' needs the test's request fixture")
        from harness.testing.agent_task import run_agent_task

        run_agent_task(ctx, request)
        return
    # A test double's own files need no fsync (a killed process loses nothing written; only
    # the harness's ledger must survive a power loss): what is measured is the runner.
    body = ctx.instance_dir / "selftest_task_body.json"
    body.write_text(json.dumps({"instance_id": ctx.instance_id, "work": task["work"]}))
    ctx.output("task_body", body)
    ctx.prepared()
    with open(ctx.run_root / EXECUTIONS, "a", encoding="utf-8") as log:
        log.write(f"{ctx.instance_id} {os.getpid()} {time.time():.3f}\n")
    work = task["work"]
    ctx.result.agent_started = True
    if "cost" in task:
        ctx.result.cost_usd = float(task["cost"])
        ctx.result.cost_known = True
    if work == "sleep":
        time.sleep(float(task.get("seconds", 1.0)))
        work = task.get("then", "succeed")
    if work == "succeed":
        ctx.scored(score=1.0)
    elif work == "fail":
        ctx.scored(score=0.0)
    elif work == "partial":
        ctx.scored(score=float(task.get("score", 0.5)))
    elif work == "agent_fail":
        ctx.agent_failed("task_not_completed", "the agent gave up")
    elif work == "crash":
        os._exit(int(task.get("exit_code", 17)))
    elif work == "infra":
        raise InfraError("simulated infrastructure failure", task.get("reason", "docker_unavailable"))
    elif work == "raise":
        raise RuntimeError("simulated adapter bug")
    else:
        raise ValueError(f"unknown selftest work {work!r}")
