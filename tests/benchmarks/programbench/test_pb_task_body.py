"""The instruction, and the task the gateway agent builds from ProgramBench's terms (the
body of the Ouroboros ProgramBench adapter, field by field: the benchmark builds none)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from benchmarks.programbench.instruction import render_instruction
from benchmarks.programbench.task_body import DEFAULT_TIMEOUT_SEC, agent_terms
from benchmarks.programbench.tasks import PBInstance, get_instance, load_instances
from harness.agents.base import AgentRequest
from harness.agents.gateway.agent import GatewayAgent
from tests.support.stand_ins import answers_id

CMATRIX = "abishekvashok__cmatrix.5c082c6"


def test_instruction_names_the_task_and_states_the_rules() -> None:
    inst = get_instance(CMATRIX)
    text = render_instruction(inst)
    assert "{{" not in text
    for needle in (CMATRIX, "abishekvashok/cmatrix", "(originally written in C; difficulty: easy)"):
        assert needle in text
    for rule in (
        "./reference_executable",
        "./compile.sh",
        "./executable",
        "standard output",
        "standard error and exit code",
        "No internet",
        "Do not wrap",
        "decompile",
        "strace",
        "argv[0]",
    ):
        assert rule in text, rule
    assert render_instruction(inst, "{{difficulty}}") == "easy"


def test_unrated_difficulty_and_unknown_placeholder() -> None:
    none = next(i for i in load_instances() if i.difficulty == "none")
    assert render_instruction(none, "{{ difficulty }}") == "unrated"
    with pytest.raises(KeyError, match="unknown placeholder"):
        render_instruction(none, "{{instance}}")


def pb_body(inst: PBInstance, *, instruction: str = "do it", container: str = "hx-run1-cmatrix",
            host: str | None = None, timeout: float = DEFAULT_TIMEOUT_SEC) -> dict[str, Any]:
    """What the gateway agent submits for ``inst`` in a sandbox as ProgramBench makes it
    (``/workspace``, no network, ``host`` bind-mounted there when given)."""
    spec = SimpleNamespace(workdir="/workspace", network="none",
                           binds=((host, "/workspace"),) if host else ())
    sandbox = SimpleNamespace(name=container, id="0" * 64, user="agent", spec=spec,
                              exec=answers_id())
    request = AgentRequest(instance_id=inst.instance_id, instance_dir=Path("."),
                           instruction=instruction, sandbox=sandbox,  # type: ignore[arg-type]
                           timeout_sec=timeout, adapter="programbench",
                           terms=agent_terms(inst))
    return GatewayAgent.task_preview(request).body()


def test_task_body_shape() -> None:
    inst = get_instance(CMATRIX)
    body = pb_body(inst)
    assert body["description"] == "do it"
    assert body["executor_ref"] == {
        "type": "docker_exec",
        "id": "hx-run1-cmatrix",
        "container_name": "hx-run1-cmatrix",
        "network": "none",
        "workspace_backend_path": "/workspace",
        "path_mappings": [],
        "user": "agent",
    }
    assert body["allowed_resources"] == {"web": False, "network": False, "internet": False}
    assert body["resource_policy"]["protected_artifacts"] == [
        {
            "id": "programbench_reference",
            "role": "black_box_reference",
            "paths": ["/workspace/reference_executable", "reference_executable"],
            "allow": ["execute"],
            "deny": [
                "read_bytes",
                "copy",
                "hash",
                "static_introspection",
                "dynamic_trace",
                "debug",
            ],
        }
    ]
    assert body["disabled_tools"] == ["claude_code_edit"]
    [claim] = body["acceptance_claims"]
    assert claim["id"] == "behavioral_equivalence" and claim["priority"] == "must"
    profile = body["metadata"]["budget_profile"]
    assert profile == {
        "cost_hard_stop_pct": 0,
        "improvement_policy": "until_deadline",
        "max_improvement_passes": 6,
        "reserve_finalization_pct": 15,
        "stall_rounds_threshold": 12,
    }
    assert body["metadata"]["programbench_instance_id"] == CMATRIX
    assert body["actor_id"] == body["source"] == "programbench"
    assert body["timeout_sec"] == DEFAULT_TIMEOUT_SEC == 21600
    assert body["memory_mode"] == "empty" and body["workspace_mode"] == "external"
    assert "workspace_root" not in body
    json.dumps(body)  # what is POSTed


def test_budget_profile_is_the_specifications() -> None:
    """The ProgramBench adapter specification's pacing: until the deadline, at most 6
    improvement passes, 15 % kept for finalization, a stall after 12 rounds."""
    body = pb_body(get_instance(CMATRIX), instruction="x", container="c1")
    profile = body["metadata"]["budget_profile"]
    assert profile["improvement_policy"] == "until_deadline"
    assert profile["max_improvement_passes"] == 6
    assert profile["reserve_finalization_pct"] == 15
    assert profile["stall_rounds_threshold"] == 12


def test_bind_mounted_workspace_becomes_workspace_root() -> None:
    inst = get_instance(CMATRIX)
    body = pb_body(inst, instruction="x", container="c1", host="/srv/runs/r1/programbench/ws",
                   timeout=600)
    assert body["workspace_root"] == "/srv/runs/r1/programbench/ws"
    assert body["executor_ref"]["workspace_host_path"] == "/srv/runs/r1/programbench/ws"
    assert body["timeout_sec"] == 600


def test_all_200_bodies_well_under_a_minute() -> None:
    code = """
import json, time
t = time.perf_counter()
from pathlib import Path
from benchmarks.programbench.instruction import render_instruction
from benchmarks.programbench.task_body import agent_terms
from benchmarks.programbench.tasks import select_instances
from harness.agents.base import AgentRequest
from harness.agents.gateway.agent import GatewayAgent
n = 0
for inst in select_instances():
    request = AgentRequest(instance_id=inst.instance_id, instance_dir=Path("."),
                           instruction=render_instruction(inst), adapter="programbench",
                           timeout_sec=21600, terms=agent_terms(inst))
    n += len(json.dumps(GatewayAgent.task_preview(request).body())) > 0
print(n, time.perf_counter() - t)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    count, seconds = out.stdout.split()
    assert int(count) == 200
    assert float(seconds) < 5.0, f"200 task bodies took {seconds}s"
