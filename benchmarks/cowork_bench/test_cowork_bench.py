"""The one Cowork Bench test: each item is one task (see instance.py for the steps)."""

import pytest

from benchmarks.cowork_bench.instance import run_cowork_instance

pytestmark = pytest.mark.harness_benchmark("cowork_bench")


def test_cowork_bench(harness_instance, request):
    run_cowork_instance(harness_instance, request)
