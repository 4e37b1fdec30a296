"""The Harbor task format as a pytest benchmark: its options and its declaration."""

from __future__ import annotations

import pytest

from benchmarks.harbor.benchmark import HarborBenchmark

BENCHMARK = HarborBenchmark()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("harbor", "Harbor task format (benchmarks/harbor)")
    group.addoption("--harbor-tasks", default=None, metavar="DIR",
                    help="a Harbor task folder (task.toml, instruction.md, environment/, "
                         "tests/, solution/), or a folder of them")
    group.addoption("--harbor-image-map", action="append", default=[], metavar="IMAGE=LOCAL",
                    help="build a Dockerfile's FROM IMAGE from LOCAL instead (an engine "
                         "without a registry; repeatable); recorded with the run's settings")


def pytest_harness_adapters(config: pytest.Config) -> list[HarborBenchmark]:
    return [BENCHMARK]
