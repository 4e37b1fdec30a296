"""The selftest ``agent`` work: one small task driven through the configured agent.

The agent must write ``answer`` (default ``42``) to ``/workspace/answer.txt`` in a Docker
sandbox; the score is 1 when the file holds it. ``--agent oracle`` runs the reference
solution; ``--agent gateway`` sends a task body whose ``metadata.reference_plan`` the
reference agent server replays in the sandbox (``docker_exec``); ``--agent command`` runs
the user's command in the sandbox with the instruction on stdin.
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from harness.agents.base import AgentRequest, OraclePlan
from harness.core.fsutil import atomic_write_json
from harness.runner.agent_choice import agent_choice
from harness.runner.agent_run import run_agent
from harness.runner.instance import InstanceContext

WORKSPACE = "/workspace"


def task_body(ctx: InstanceContext, container: str, instruction: str, answer: str,
              step_cost: float, think_s: float = 0.0) -> dict[str, Any]:
    """``think_s``: a last step that only waits (a task still running for that long)."""
    steps: list[dict[str, Any]] = [
        {"run": f"echo {shlex.quote(answer)} > {WORKSPACE}/answer.txt",
         "cost_usd": step_cost, "prompt_tokens": 120, "completion_tokens": 30}]
    if think_s:
        steps.append({"run": "true", "sleep_s": think_s})
    return {
        "description": instruction,
        "task_id": f"{ctx.run_id}-{ctx.instance_id.replace('@', ':')}-a{ctx.attempt}",
        "workspace_mode": "external",
        "memory_mode": "empty",
        "allowed_resources": {"web": False, "network": False, "internet": False},
        "executor_ref": {"type": "docker_exec", "id": container, "container_name": container,
                         "network": "none", "workspace_backend_path": WORKSPACE},
        "actor_id": "selftest",
        "source": "selftest",
        "timeout_sec": 300,
        "metadata": {"reference_plan": {"steps": steps}},
    }


def run_agent_task(ctx: InstanceContext, request: pytest.FixtureRequest) -> None:
    task: dict[str, Any] = ctx.data
    answer = str(task.get("answer", "42"))
    instruction = f"Write the number {answer} to {WORKSPACE}/answer.txt and stop."
    (ctx.instance_dir / "instruction.md").write_text(instruction + "\n")
    ctx.output("instruction", ctx.instance_dir / "instruction.md")
    if ctx.dry_run:
        body = task_body(ctx, "<container>", instruction, answer, 0.0)
        atomic_write_json(ctx.instance_dir / "selftest_task_body.json", body)
        ctx.output("task_body", ctx.instance_dir / "selftest_task_body.json")
        ctx.prepared()
    agent = request.getfixturevalue("harness_agent")
    factory = request.getfixturevalue("sandbox_factory")
    image = request.getfixturevalue("sandbox_image")
    sandbox = factory(image, user="agent", workdir=WORKSPACE, network="none",
                      cap_drop=("SYS_PTRACE",))
    body = task_body(ctx, sandbox.name, instruction, answer, float(task.get("cost", 0.25)),
                     float(task.get("think_s", 0.0)))
    outcome = run_agent(ctx, agent, AgentRequest(
        instance_id=ctx.instance_id, instance_dir=ctx.instance_dir, instruction=instruction,
        task_body=body, sandbox=sandbox, timeout_sec=float(task.get("timeout", 120)),
        env_allowlist=agent_choice(request.config).env,
        oracle=OraclePlan(commands=[f"echo {shlex.quote(answer)} > {WORKSPACE}/answer.txt"]),
        adapter="selftest"))
    got = sandbox.exec(["cat", f"{WORKSPACE}/answer.txt"], user="root", timeout=30)
    text = got.stdout.decode().strip() if got.exit_code == 0 else ""
    ctx.result.details.setdefault(ctx.benchmark, {})["answer"] = text  # its own section
    if not outcome.completed:
        ctx.agent_failed(outcome.reason_code or "task_not_completed")
        return
    ctx.scored(score=1.0 if text == answer else 0.0, official_eval_status="completed")
