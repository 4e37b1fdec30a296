"""Cowork agents: the agent container as the runner's agents (``--agent``) see it
(:class:`AgentBox`; the trial's steps in :mod:`.steps` hand it to them), the spend they
leave on record, and three Cowork agent steps that need no model: ``nop``, ``oracle`` (copies the groundtruth) and ``script`` (runs a
Python script inside the agent container, e.g. one that writes DB rows).

The oracle reads the groundtruth from the host checkout (the agent container has none) and
copies it into the workspace; it can pass file-only checks, never database ones.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.cowork_bench import models as m
from benchmarks.cowork_bench.containers import AGENT, AGENT_ID
from benchmarks.cowork_bench.phases import AGENT_LOGS, WORKSPACE, AgentContext, AgentOutcome
from benchmarks.cowork_bench.tasks import task_dir
from harness.api import (
    MAX_OUTPUT_BYTES,
    AgentDetails,
    ContainerExit,
    Exclude,
    ExecResult,
    NewDir,
    Sandbox,
    SandboxSpec,
    atomic_write_text,
    pack_tree,
)
from harness.api import AgentOutcome as RunnerOutcome

if TYPE_CHECKING:
    import docker

RUNNER_DIR = m.RUNNER_DIR


def nop_agent(ctx: AgentContext) -> AgentOutcome:
    return AgentOutcome(status="success", reason_code="nop")


def oracle_agent(ctx: AgentContext) -> AgentOutcome:
    gt = task_dir(ctx.env.bench_root, ctx.env.task.instance_id) / "groundtruth_workspace"
    files = [p for p in sorted(gt.iterdir()) if p.name != ".gitkeep"] if gt.is_dir() else []
    if files:
        data = pack_tree([(p, p.name) for p in files], uid=AGENT_ID, gid=AGENT_ID)
        ctx.container.put_archive(WORKSPACE, data)
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
        ctx.container.write_file(
            f"{AGENT_LOGS}/{self.name}.log", (res.stdout_text + res.stderr_text).encode()
        )
        call = {"tool": "python_execute", "arguments": {"code": self.script},
                "exit": res.exit_status}  # fmt: skip
        if res.exit_status != 0:
            return AgentOutcome(status="failed", reason_code="script_failed", tool_calls=[call])
        return AgentOutcome(status="success", reason_code="script", tool_calls=[call])


# --------------------------------------------------------------------------- runner agents


class AgentBox:
    """The agent container as the runner's agents see it: the sandbox contract
    (:class:`harness.sandbox.protocol.Sandbox`; ``tests/sandbox/test_self_check.py``).

    Every command runs as the unprivileged ``agent`` user in the task workspace, whatever
    user or directory the agent asks for (a ``--agent-user root`` gets ``agent`` too): the
    agent never acts as root here. Files copied in belong to the agent user. A model gateway
    (``--model-upstream``) links it through its id, client and spec: the relay joins the
    task's internal network, which the container is on already.
    """

    def __init__(self, container: Sandbox) -> None:
        self.container = container
        self.name: str = container.name
        self.id: str = container.id
        self.client: docker.DockerClient = container.client
        self.spec: SandboxSpec = container.spec
        self.user: str = AGENT
        self.workdir: str | None = WORKSPACE

    def exec(
        self,
        cmd: str | Sequence[str],
        *,
        user: str | None = None,
        timeout: float | None = None,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        max_output: int = MAX_OUTPUT_BYTES,
        tail_output: int = 0,
    ) -> ExecResult:
        return self.container.exec(
            cmd, user=AGENT, timeout=timeout, stdin=stdin, env=env, workdir=WORKSPACE,
            max_output=max_output, tail_output=tail_output,
        )

    def copy_in(
        self, src: Path, dest_dir: str, *, uid: int | None = None, gid: int | None = None
    ) -> None:
        """Copy into ``dest_dir`` (relative: in the workspace), owned by the agent user; a
        missing ``dest_dir`` is made the agent's through the daemon (no capability inside)."""
        dest = dest_dir if dest_dir.startswith("/") else f"{WORKSPACE}/{dest_dir}"
        if self.exec(["test", "-d", dest], timeout=60).exit_code != 0:
            self.container.make_dirs([NewDir(dest, AGENT_ID, AGENT_ID)])
        self.container.copy_in(src, dest, uid=AGENT_ID, gid=AGENT_ID)

    def copy_out(self, src: str, dest: Path, *, exclude: Exclude | None = None) -> list[str]:
        return self.container.copy_out(src, dest, exclude=exclude)

    def exit_state(self, since: float) -> ContainerExit | None:
        return self.container.exit_state(since)

    def end_user_processes(self, user: str) -> str:
        """Nothing: the task's MCP servers run as the agent user in this container, so its
        processes are the task's, not an agent's leftovers (the container ends with the
        instance)."""
        return ""


def write_usage(inst_dir: Path, records: list[dict[str, Any]]) -> None:
    """``runtime_usage.jsonl``: beside, never inside, the folders the agent's export lands in."""
    if records:
        atomic_write_text(inst_dir / m.RUNTIME_USAGE,
                          "".join(json.dumps(r) + "\n" for r in records))


def orphan_usage(details: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``llm_usage`` records of earlier attempts' gateway tasks this attempt settled first
    (the agent's own ``orphan_tasks``: ``details.agent.details``): what they spent, from their copied events (tokens) and
    their settled result (cost), so the spend of a killed run is not lost. A task counts when
    its events show usage or its settled result reports a cost (a run killed before the
    first events copy has only the latter)."""
    agent_details = AgentDetails.read(details).details or {}
    out = []
    for orphan in agent_details.get("orphan_tasks") or []:
        cost = orphan.get("cost_usd")
        costed = isinstance(cost, int | float) and not isinstance(cost, bool) and cost > 0
        if orphan.get("paid_activity") != "observed" and not costed:
            continue
        out.append({"type": "llm_usage", "source": "orphan_task", "task_id": orphan.get("task_id"),
                    "prompt_tokens": orphan.get("prompt_tokens") or 0,
                    "completion_tokens": orphan.get("completion_tokens") or 0,
                    "cost_usd": cost if isinstance(cost, int | float) else None})
    return out


def usage_record(outcome: RunnerOutcome) -> dict[str, Any] | None:
    """An ``llm_usage`` record from the runtime's reported tokens (``paid_activity``)."""
    tokens = outcome.tokens
    if not (tokens.prompt or tokens.completion or tokens.total):
        return None
    return {
        "type": "llm_usage",
        "source": "runtime_result",
        "task_id": outcome.task_id,
        "prompt_tokens": tokens.prompt or 0,
        "completion_tokens": tokens.completion or 0,
        "cost_usd": outcome.cost_usd if outcome.cost_known else None,
    }

