"""The task contract (request validation) and result classification (pure)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from harness.agents.gateway.classify import classify_result
from harness.agents.gateway.models import (
    BudgetProfile,
    ExecutorRef,
    ProtectedArtifact,
    TaskCreateRequest,
    TaskResult,
)

PB_ARTIFACT = {
    "id": "programbench_reference",
    "role": "black_box_reference",
    "paths": ["/workspace/reference_executable", "reference_executable"],
    "allow": ["execute"],
    "deny": ["read_bytes", "copy", "hash", "static_introspection", "dynamic_trace", "debug"],
}


def programbench_body(**over: object) -> dict:
    body = {
        "description": "Reverse-engineer ./reference_executable",
        "workspace_root": "/runs/r1/abc/workspace",
        "workspace_mode": "external",
        "memory_mode": "empty",
        "allowed_resources": {"web": False, "network": False, "internet": False},
        "resource_policy": {"protected_artifacts": [PB_ARTIFACT]},
        "executor_ref": {
            "type": "docker_exec",
            "id": "abc",
            "container_name": "harness-r1-abc",
            "network": "none",
            "workspace_host_path": "/runs/r1/abc/workspace",
            "workspace_backend_path": "/workspace",
        },
        "disabled_tools": ["claude_code_edit"],
        "actor_id": "programbench",
        "source": "programbench",
        "acceptance_claims": [
            {"id": "behavioral_equivalence", "claim": "same behaviour", "priority": "must"}
        ],
        "metadata": {
            "source": "programbench",
            "budget_profile": {
                "cost_hard_stop_pct": 0,
                "improvement_policy": "until_deadline",
                "max_improvement_passes": 3,
                "reserve_finalization_pct": 15,
                "stall_rounds_threshold": 12,
            },
        },
        "timeout_sec": 21600,
    }
    body.update(over)
    return body


def test_programbench_body_is_valid_and_round_trips():
    request = TaskCreateRequest.model_validate(programbench_body())
    body = request.body()
    assert body["executor_ref"]["container_name"] == "harness-r1-abc"
    assert body["resource_policy"]["protected_artifacts"][0]["deny"][0] == "read_bytes"
    assert TaskCreateRequest.model_validate(body) == request


def test_only_description_is_required():
    assert TaskCreateRequest(description="x").body() == {
        "description": "x",
        "type": "task",
        "allowed_resources": {},
        "disabled_tools": [],
        "acceptance_claims": [],
        "answer_protocol": "",
        "attachments": [],
        "metadata": {},
    }
    with pytest.raises(ValidationError):
        TaskCreateRequest.model_validate({})


@pytest.mark.parametrize(
    "ref, message",
    [
        ({"type": "docker_exec"}, "container_name is required"),
        ({"type": "local", "network": "none"}, "cannot use network 'none'"),
        ({"type": "local", "workspace_backend_path": "workspace"}, "must be absolute"),
        ({"type": "local", "workspace_backend_path": "/a/../b"}, "'..'"),
        ({"type": "local", "workspace_backend_path": "/"}, "must not be '/'"),
        (
            {"type": "local", "path_mappings": [{"host_path": "/h", "backend_path": "rel"}]},
            "must be absolute",
        ),
        ({"type": "ssh"}, "type"),
    ],
)
def test_executor_ref_rules(ref, message):
    with pytest.raises(ValidationError) as info:
        ExecutorRef.model_validate(ref)
    assert message in str(info.value)


def test_mappings_must_cover_workspace_root():
    with pytest.raises(ValidationError) as info:
        TaskCreateRequest.model_validate(programbench_body(workspace_root="/elsewhere"))
    assert "must cover workspace_root" in str(info.value)
    mapped = programbench_body(workspace_root="/elsewhere/ws")
    mapped["executor_ref"]["path_mappings"] = [
        {"host_path": "/elsewhere", "backend_path": "/mnt/else"}
    ]
    TaskCreateRequest.model_validate(mapped)


def test_request_rules():
    with pytest.raises(ValidationError, match="shared"):
        TaskCreateRequest.model_validate(programbench_body(memory_mode="shared"))
    with pytest.raises(ValidationError, match="reserved"):
        TaskCreateRequest.model_validate(programbench_body(metadata={"executor_ref": {}}))
    with pytest.raises(ValidationError, match="timezone"):
        TaskCreateRequest.model_validate(programbench_body(deadline_at="2026-01-01T00:00:00"))
    TaskCreateRequest.model_validate(programbench_body(deadline_at="2026-01-01T00:00:00+00:00"))
    with pytest.raises(ValidationError, match="task_id"):
        TaskCreateRequest(description="x", task_id="../etc")
    with pytest.raises(ValidationError):
        TaskCreateRequest.model_validate(programbench_body(unknown_field=1))


def test_budget_profile_has_exactly_five_keys():
    assert set(BudgetProfile().model_dump()) == {
        "cost_hard_stop_pct",
        "improvement_policy",
        "max_improvement_passes",
        "reserve_finalization_pct",
        "stall_rounds_threshold",
    }
    with pytest.raises(ValidationError):
        BudgetProfile.model_validate({"improvement_policy": "forever"})
    with pytest.raises(ValidationError):
        TaskCreateRequest.model_validate(
            programbench_body(metadata={"budget_profile": {"extra_key": 1}})
        )


def test_protected_artifact_defaults_and_rules():
    item = ProtectedArtifact(id="x", paths=["/a"])
    assert item.role == "black_box_reference"
    with pytest.raises(ValidationError, match="both allows and denies"):
        ProtectedArtifact(id="x", paths=["/a"], allow=["execute"], deny=["execute"])


def test_result_parsing_is_tolerant():
    result = TaskResult.parse_tolerant(
        {"status": "completed", "prompt_tokens": "many", "new_field": {"a": 1}}
    )
    assert result.status == "completed" and result.prompt_tokens is None
    assert result.dropped_fields == {"prompt_tokens": "many"}
    assert result.model_extra == {"new_field": {"a": 1}}
    assert TaskResult.parse_tolerant(["not", "a", "dict"]).status is None


@pytest.mark.parametrize(
    "envelope, infra",
    [
        ({"status": "failed", "reason_code": "llm_api_error"}, True),
        ({"status": "failed", "reason_code": "provider_unavailable"}, True),
        ({"status": "failed", "outcome_axes": {"execution": {"status": "infra_failed"}}}, True),
        ({"status": "failed", "outcome_axes": {"execution": {"status": "llm_api_error"}}}, True),
        (
            {
                "status": "completed",
                "outcome_axes": {
                    "execution": {"status": "completed", "reason_code": "llm_api_error"}
                },
            },
            True,
        ),
        ({"status": "failed", "reason_code": "task_failed", "error": "llm_api_error"}, False),
        ({"status": "completed"}, False),
    ],
)
def test_infra_classification(envelope, infra):
    outcome = classify_result(TaskResult.parse_tolerant(envelope))
    assert outcome.infra is infra
    if infra:
        assert not outcome.completed


@pytest.mark.parametrize(
    "code",
    [
        "budget_exhausted",
        "round_limit",
        "finalization_grace",
        "deadline_local",
        "children_unabsorbed",
        "owner_requested_finalization",
    ],
)
def test_truncation_codes(code):
    outcome = classify_result(TaskResult(status="completed", reason_code=code))
    assert outcome.truncated and outcome.completed and not outcome.infra
    assert outcome.runtime_outcome.truncated


def test_cost_and_tokens():
    outcome = classify_result(
        TaskResult.parse_tolerant(
            {
                "task_id": "t1",
                "status": "completed",
                "accounted_upper_bound_usd": 1.0,
                "accounted_upper_bound_usd_with_children": 1.5,
                "cost_known": True,
                "cost_final": True,
                "prompt_tokens": 10,
                "completion_tokens": 5,
                "loop_outcome": {"resource_limit": None},
                "degraded": True,
                "degraded_reason": "r",
            }
        )
    )
    assert outcome.cost_usd == 1.5 and outcome.cost_known and outcome.task_id == "t1"
    assert outcome.tokens.model_dump() == {"prompt": 10, "completion": 5, "total": 15}
    ro = outcome.runtime_outcome
    assert ro.degraded and ro.degraded_reason == "r" and ro.available
    partial = classify_result(
        TaskResult(
            status="completed",
            accounted_upper_bound_usd=1.0,
            cost_known=True,
            cost_with_children_partial=True,
        )
    )
    assert partial.cost_usd == 1.0 and not partial.cost_known
    unknown = classify_result(TaskResult(status="completed"))
    assert unknown.cost_usd is None and not unknown.cost_known
    assert unknown.tokens.total is None
