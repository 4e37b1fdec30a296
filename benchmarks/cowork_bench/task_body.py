"""The gateway task body (``POST /api/tasks``) for one Cowork Bench instance (``--agent gateway``).

Per the Ouroboros Cowork adapter (reference §4 steps 3 and 11): ``description`` = the task's
system prompt with the workspace placeholder filled in, then the task text; an external
workspace; empty memory; ``actor_id``/``source`` ``cowork-bench``;
``metadata{delegation_role: "root"}``; the disabled tools; ``timeout_sec`` = task timeout
minus the setup time already spent minus a finalisation margin, at least 60 s.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.cowork_bench.phases import WORKSPACE_PLACEHOLDER
from benchmarks.cowork_bench.tasks import TaskDocs, read_docs
from harness.api import ExecutorRef, TaskCreateRequest

SOURCE = "cowork-bench"
WEB_TOOLS = ("web_search", "browse_page", "browser_action", "youtube_transcript")
DELEGATED_VISION_TOOLS = ("analyze_screenshot", "vlm_query")
MIN_TIMEOUT_SEC = 60
FINALIZATION_MARGIN_SEC = 105  # the reference adapter's margin for writing its results


def disabled_tools(subagents: bool = False) -> list[str]:
    tools = [*WEB_TOOLS, *DELEGATED_VISION_TOOLS, "claude_code_edit"]
    if not subagents:
        tools.append("schedule_subagent")
    return tools


def gateway_timeout(
    task_timeout_sec: float, setup_overhead_sec: float, margin_sec: float = FINALIZATION_MARGIN_SEC
) -> int:
    return max(MIN_TIMEOUT_SEC, int(task_timeout_sec - setup_overhead_sec - margin_sec))


def description(
    bench_root: Path, instance_id: str, workspace: str, docs: TaskDocs | None = None
) -> str:
    """``docs``: the task's docs when the caller has read them already."""
    docs = docs or read_docs(bench_root, instance_id)
    prompt = docs.system_prompt.replace(WORKSPACE_PLACEHOLDER, workspace)
    return prompt.rstrip() + "\n\n" + docs.task.strip() + "\n"


def docker_exec_ref(container_name: str, workspace: str) -> ExecutorRef:
    """Process tools run in the agent container (``docker exec``); the workspace is there."""
    return ExecutorRef(
        type="docker_exec",
        id=container_name,
        container_name=container_name,
        workspace_backend_path=workspace,
    )


def build_task_body(
    bench_root: Path,
    instance_id: str,
    *,
    workspace_root: str | None = None,
    executor_ref: ExecutorRef | None = None,
    task_timeout_sec: float = 3600,
    setup_overhead_sec: float = 0.0,
    subagents: bool = False,
    max_steps: int | None = None,
    task_id: str | None = None,
    docs: TaskDocs | None = None,
) -> TaskCreateRequest:
    """The request for one instance.

    ``workspace_root`` is the workspace path the agent server itself sees; with an
    ``executor_ref`` (``docker_exec``) the workspace lives only in the container, so the
    body names it as ``executor_ref.workspace_backend_path`` instead.
    """
    workspace = workspace_root or (executor_ref.workspace_backend_path if executor_ref else None)
    if workspace is None:
        raise ValueError("build_task_body needs workspace_root or an executor_ref workspace")
    metadata: dict[str, object] = {"delegation_role": "root"}
    if max_steps is not None:
        metadata["max_steps"] = max_steps
    return TaskCreateRequest(
        description=description(bench_root, instance_id, workspace, docs),
        task_id=task_id,
        workspace_root=workspace_root,
        workspace_mode="external",
        memory_mode="empty",
        disabled_tools=disabled_tools(subagents),
        executor_ref=executor_ref,
        actor_id=SOURCE,
        source=SOURCE,
        metadata=metadata,
        timeout_sec=gateway_timeout(task_timeout_sec, setup_overhead_sec),
    )
