"""ProgramBench's registration with the core (entry point ``harness.benchmarks``)."""

from __future__ import annotations

from harness.api import BenchmarkRegistration, ImageStep


def _fixture() -> object:
    from benchmarks.programbench.fixture import ensure_fixture

    return ensure_fixture()


REGISTRATION = BenchmarkRegistration(
    name="programbench",
    command=("benchmarks.programbench.cli", "programbench_command",
             "ProgramBench tools: export, gate, submission, prepare, rescore"),
    images=(ImageStep("ProgramBench offline fixture", _fixture),),
)
