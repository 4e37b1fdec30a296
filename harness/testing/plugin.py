"""Conftest helpers that make a directory a ``selftest`` benchmark.

A test suite for the runner writes a ``conftest.py`` with
``pytest_plugins = ["harness.testing.plugin"]`` and a test module::

    import pytest
    from harness.testing.adapter import run_selftest_instance

    pytestmark = pytest.mark.harness_benchmark("selftest")

    def test_selftest(harness_instance):
        run_selftest_instance(harness_instance)

It also loads the fake-file meter (:mod:`harness.testing.fake_meter`): a suite's runs may
pass ``--meter fake-file:PATH``.
"""

from __future__ import annotations

import pytest

from harness.core.adapter import BenchmarkAdapter
from harness.testing import fake_meter  # noqa: F401  (registers --meter fake-file:PATH)
from harness.testing.adapter import SelftestAdapter


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("selftest", "built-in test benchmark")
    group.addoption("--selftest-tasks", default=None, help="JSON list of selftest instances")
    group.addoption("--selftest-scale", default=1.0, type=float,
                    help="a result-affecting option (enters the config fingerprint)")
    group.addoption("--selftest-monitor", action="store_true", default=False,
                    help="keep monitor.json as a benchmark that asks for it does (Cowork)")


def pytest_harness_adapters(config: pytest.Config) -> list[BenchmarkAdapter]:
    adapter = SelftestAdapter()
    adapter.writes_monitor = bool(config.getoption("selftest_monitor", False))
    return [adapter]
