"""What a Cowork Bench task says to its agent (``--agent gateway``: the agent server's task,
built by that agent from the trial's request and :meth:`.steps.CoworkSteps.agent_terms`).

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
