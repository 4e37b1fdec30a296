"""The one ProgramBench test: each item is one instance, whose life the runner's trial runs
(harness.runner.trial; ProgramBench's steps are in runner.py)."""

import pytest

from harness.api import run_trial

pytestmark = pytest.mark.harness_benchmark("programbench")


def test_programbench(harness_instance, request):
    run_trial(harness_instance, request)
