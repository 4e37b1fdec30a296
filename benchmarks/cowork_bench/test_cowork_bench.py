"""The one Cowork Bench test: each item is one task, its life the runner's trial
(:mod:`benchmarks.cowork_bench.steps` gives its steps)."""

import pytest

from harness.api import run_trial

pytestmark = pytest.mark.harness_benchmark("cowork_bench")


def test_cowork_bench(harness_instance, request):
    run_trial(harness_instance, request)
