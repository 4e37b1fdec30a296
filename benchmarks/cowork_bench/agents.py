"""Cowork agents that need no model: ``nop``, ``oracle`` (copies the groundtruth) and
``script`` (runs a Python script inside the agent container, e.g. one that writes DB rows).

The oracle reads the groundtruth from the host checkout (the agent container has none) and
copies it into the workspace; it can pass file-only checks, never database ones.
"""

from __future__ import annotations

from benchmarks.cowork_bench import docker_ops
from benchmarks.cowork_bench.phases import AGENT_LOGS, WORKSPACE, AgentContext, AgentOutcome
from benchmarks.cowork_bench.tasks import task_dir


def nop_agent(ctx: AgentContext) -> AgentOutcome:
    return AgentOutcome(status="success", reason_code="nop")


def oracle_agent(ctx: AgentContext) -> AgentOutcome:
    gt = task_dir(ctx.env.bench_root, ctx.env.task.instance_id) / "groundtruth_workspace"
    files = [p for p in sorted(gt.iterdir()) if p.name != ".gitkeep"] if gt.is_dir() else []
    if files:
        docker_ops.put_archive(ctx.container, WORKSPACE,
                               docker_ops.tar_tree([(p, p.name) for p in files]))  # fmt: skip
    return AgentOutcome(status="success", reason_code="oracle")


def script_agent(script: str, name: str = "script") -> ScriptAgent:
    return ScriptAgent(script, name)


class ScriptAgent:
    """Runs ``python3 -c <script>`` from the checkout root with the sidecar's PG environment;
    its output goes to ``agent/<name>.log``; a non-zero exit is ``failed``."""

    def __init__(self, script: str, name: str = "script") -> None:
        self.script = script
        self.name = name

    def __call__(self, ctx: AgentContext) -> AgentOutcome:
        res = ctx.exec(["python3", "-c", self.script])
        log = f"{AGENT_LOGS}/{self.name}.log"
        ctx.exec(["python3", "-c", f"open({log!r}, 'w').write({(res.stdout + res.stderr)!r})"])
        call = {"tool": "python_execute", "arguments": {"code": self.script}, "exit": res.exit_code}
        if res.exit_code != 0:
            return AgentOutcome(status="failed", reason_code="script_failed", tool_calls=[call])
        return AgentOutcome(status="success", reason_code="script", tool_calls=[call])
