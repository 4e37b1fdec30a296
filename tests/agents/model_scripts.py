"""Scripts for the FAKE model server (``harness.testing.fake_model_server``): canned
trajectories that solve or fail the ProgramBench fixture with bash tool calls."""

from __future__ import annotations

import functools
from typing import Any

from benchmarks.programbench.fixture import ensure_fixture

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def heredoc(rel: str, text: str, mode: str) -> str:
    return f"cat > {rel} <<'HARNESS_EOF'\n{text}HARNESS_EOF\nchmod {mode} {rel}"


def solution_commands() -> list[str]:
    files = ensure_fixture().oracle_contents()
    return [heredoc(rel, data.decode(), "755" if rel.endswith(".sh") else "644")
            for rel, data in sorted(files.items())]


def step(command: str, prompt: int = 1000, completion: int = 100,
         cost: float | None = None) -> dict[str, Any]:
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion}
    if cost is not None:
        usage["cost"] = cost
    return {"content": "Next step.", "usage": usage,
            "tool_calls": [{"name": "bash", "arguments": {"command": command}}]}


def solve_script(cost: float | None = None) -> dict[str, Any]:
    """Write the fixture's correct solution, check it, submit."""
    cmds = [*solution_commands(), "bash compile.sh && ./executable 2 + 3", SUBMIT]
    return {"responses": [step(c, cost=cost) for c in cmds]}


@functools.cache
def solve_steps() -> int:
    """How many model calls :func:`solve_script` makes (asked when a test runs: it reads the
    fixture's oracle files, never at collection)."""
    return len(solve_script()["responses"])


def partial_script(loop_command: str = "ls -la") -> dict[str, Any]:
    """Write only calculator.sh (no compile.sh), then keep exploring forever."""
    first = solution_commands()[0]
    return {"responses": [step(first), step(loop_command)], "loop": True}
