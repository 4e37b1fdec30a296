"""The one Harbor test: each item is one task folder, run by the harness's trial."""

import pytest

from harness.api import run_trial

pytestmark = pytest.mark.harness_benchmark("harbor")


def test_harbor(harness_instance, request):
    run_trial(harness_instance, request)
