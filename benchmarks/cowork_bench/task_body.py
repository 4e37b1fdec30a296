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
from benchmarks.cowork_bench.tasks import task_dir
from harness.agents.gateway_models import TaskCreateRequest

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


def description(bench_root: Path, instance_id: str, workspace: str) -> str:
    docs = task_dir(bench_root, instance_id) / "docs"
    prompt = (docs / "agent_system_prompt.md").read_text(encoding="utf-8")
    task = (docs / "task.md").read_text(encoding="utf-8")
    return prompt.replace(WORKSPACE_PLACEHOLDER, workspace).rstrip() + "\n\n" + task.strip() + "\n"


def build_task_body(
    bench_root: Path,
    instance_id: str,
    *,
    workspace_root: str,
    task_timeout_sec: float = 3600,
    setup_overhead_sec: float = 0.0,
    subagents: bool = False,
    task_id: str | None = None,
) -> TaskCreateRequest:
    """The request for one instance; ``workspace_root`` is the path the agent server sees."""
    return TaskCreateRequest(
        description=description(bench_root, instance_id, workspace_root),
        task_id=task_id,
        workspace_root=workspace_root,
        workspace_mode="external",
        memory_mode="empty",
        disabled_tools=disabled_tools(subagents),
        actor_id=SOURCE,
        source=SOURCE,
        metadata={"delegation_role": "root"},
        timeout_sec=gateway_timeout(task_timeout_sec, setup_overhead_sec),
    )
