"""The one ProgramBench test: each item is one instance (see runner.py for the steps)."""

import pytest

from benchmarks.programbench.runner import run_instance

pytestmark = pytest.mark.harness_benchmark("programbench")


def test_programbench(harness_instance, request):
    run_instance(harness_instance, request)
