"""What a ProgramBench task says to its agent: the terms (``AgentTerms``) an agent server's
task is built from by that agent (``--agent gateway``: the task body of the Ouroboros
ProgramBench adapter, reference §1.2-§1.5, §3 step 8.6). This module builds no body.

The reference binary is the one protected artifact (execute only, §1.4); the budget
profile's five keys go in the metadata (§1.5); ``claude_code_edit`` is off; the one
acceptance claim is behavioural equivalence; the workspace is ``/workspace``, without
network.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from benchmarks.programbench import DEFAULT_TIMEOUT_SEC as DEFAULT_TIMEOUT_SEC
from benchmarks.programbench import DISABLED_TOOLS as PB_DISABLED_TOOLS

if TYPE_CHECKING:
    from benchmarks.programbench.tasks import PBInstance
    from harness.api import AgentTerms

SOURCE = "programbench"
WORKSPACE_BACKEND_PATH = "/workspace"
REFERENCE_NAME = "reference_executable"
DISABLED_TOOLS = PB_DISABLED_TOOLS  # the solve task disables claude_code_edit

# The five keys the server normalises (reference §1.5).
BUDGET_PROFILE: dict[str, Any] = {
    "cost_hard_stop_pct": 0,
    "improvement_policy": "until_deadline",
    "max_improvement_passes": 6,
    "reserve_finalization_pct": 15,
    "stall_rounds_threshold": 12,
}
BEHAVIORAL_EQUIVALENCE_CLAIM = (
    "./compile.sh builds ./executable from original source, and ./executable matches "
    "./reference_executable byte for byte on stdout, stderr and exit code; verified by "
    "differential runs of both programs on the same inputs (at least 20 cases, including "
    "error paths)."
)


def agent_terms(instance: PBInstance) -> AgentTerms:
    """The terms of one instance's task."""
    from harness.api import Acceptance, AgentTerms, ProtectedPath

    return AgentTerms(
        metadata={
            "source": SOURCE,
            "budget_profile": dict(BUDGET_PROFILE),
            "programbench_instance_id": instance.instance_id,
            "programbench_image": instance.image_ref(),
            "programbench_language": instance.language,
            "programbench_difficulty": instance.difficulty,
        },
        tools_off=tuple(DISABLED_TOOLS),
        # exactly the one item the ProgramBench adapter sends (reference §1.4)
        protected=(ProtectedPath(
            id="programbench_reference", role="black_box_reference",
            paths=(f"{WORKSPACE_BACKEND_PATH}/{REFERENCE_NAME}", REFERENCE_NAME)),),
        acceptance=(Acceptance(id="behavioral_equivalence",
                               claim=BEHAVIORAL_EQUIVALENCE_CLAIM, surface="cli",
                               support="differential_runs"),),
        source=SOURCE, workspace=WORKSPACE_BACKEND_PATH, offline=True)
