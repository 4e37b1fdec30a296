"""The gateway task body (``POST /api/tasks``) for one ProgramBench instance (``--agent gateway``).

Shape per the Ouroboros ProgramBench adapter (reference §1.2-§1.5, §3 step 8.6), typed with the
generic request models of :mod:`harness.agents.gateway.models`.
"""

from __future__ import annotations

from typing import Any

from benchmarks.programbench import DEFAULT_TIMEOUT_SEC as DEFAULT_TIMEOUT_SEC
from benchmarks.programbench import DISABLED_TOOLS as PB_DISABLED_TOOLS
from benchmarks.programbench.tasks import PBInstance
from harness.api import (
    AcceptanceClaim,
    BudgetProfile,
    ExecutorRef,
    ProtectedArtifact,
    ResourcePolicy,
    TaskCreateRequest,
)

SOURCE = "programbench"
WORKSPACE_BACKEND_PATH = "/workspace"
REFERENCE_NAME = "reference_executable"
DISABLED_TOOLS = PB_DISABLED_TOOLS  # the solve task disables claude_code_edit

# Exactly the one item the ProgramBench adapter sends (reference §1.4).
REFERENCE_ARTIFACT = ProtectedArtifact(
    id="programbench_reference",
    role="black_box_reference",
    paths=[f"{WORKSPACE_BACKEND_PATH}/{REFERENCE_NAME}", REFERENCE_NAME],
    allow=["execute"],
    deny=["read_bytes", "copy", "hash", "static_introspection", "dynamic_trace", "debug"],
)

# The five keys the server normalises (reference §1.5).
BUDGET_PROFILE = BudgetProfile(
    cost_hard_stop_pct=0,
    improvement_policy="until_deadline",
    max_improvement_passes=6,
    reserve_finalization_pct=15,
    stall_rounds_threshold=12,
)

BEHAVIORAL_EQUIVALENCE = AcceptanceClaim(
    id="behavioral_equivalence",
    claim=(
        "./compile.sh builds ./executable from original source, and ./executable matches "
        "./reference_executable byte for byte on stdout, stderr and exit code; verified by "
        "differential runs of both programs on the same inputs (at least 20 cases, including "
        "error paths)."
    ),
    surface="cli",
    support="differential_runs",
    priority="must",
)


def build_task_body(
    instance: PBInstance,
    *,
    instruction: str,
    container_name: str,
    executor_id: str | None = None,
    workspace_host_path: str | None = None,
    timeout_sec: float = DEFAULT_TIMEOUT_SEC,
    task_id: str | None = None,
    extra_metadata: dict[str, Any] | None = None,
) -> TaskCreateRequest:
    """The validated request for one instance; ``.body()`` gives the JSON to POST.

    ``workspace_host_path`` is set only when the sandbox bind-mounts a host folder on
    ``/workspace``; it then becomes ``workspace_root`` too (``workspace_mode`` stays
    ``external`` either way: the workspace is never the server's own).
    """
    executor = ExecutorRef(
        type="docker_exec",
        id=executor_id or container_name,
        container_name=container_name,
        network="none",
        workspace_host_path=workspace_host_path,
        workspace_backend_path=WORKSPACE_BACKEND_PATH,
    )
    metadata: dict[str, Any] = {
        "source": SOURCE,
        "budget_profile": BUDGET_PROFILE.model_dump(),
        "programbench_instance_id": instance.instance_id,
        "programbench_image": instance.image_ref(),
        "programbench_language": instance.language,
        "programbench_difficulty": instance.difficulty,
    }
    if extra_metadata:
        metadata.update(extra_metadata)
    return TaskCreateRequest(
        description=instruction,
        task_id=task_id,
        workspace_root=workspace_host_path,
        workspace_mode="external",
        memory_mode="empty",
        allowed_resources={"web": False, "network": False, "internet": False},
        resource_policy=ResourcePolicy(protected_artifacts=[REFERENCE_ARTIFACT]),
        executor_ref=executor,
        disabled_tools=list(DISABLED_TOOLS),
        acceptance_claims=[BEHAVIORAL_EQUIVALENCE],
        timeout_sec=timeout_sec,
        actor_id=SOURCE,
        source=SOURCE,
        metadata=metadata,
    )
