"""The one ProgramBench test: each item is one instance (see runner.py for the steps)."""

import pytest

pytestmark = pytest.mark.harness_benchmark("programbench")


def test_programbench(harness_instance, request):
    # the runner (sandbox, agents, scorer) loads when an instance runs, not at collection
    from benchmarks.programbench.runner import run_instance

    run_instance(harness_instance, request)
