"""Cowork Bench as a pytest benchmark: options, the adapter, admission.

    pytest benchmarks/cowork_bench --cowork-root PATH --agent oracle -n 2
    pytest benchmarks/cowork_bench --cowork-root PATH --dry-run

See ``adapter.py`` (options, provenance gate) and ``instance.py`` (one instance).
"""

from __future__ import annotations

import pytest

from benchmarks.cowork_bench import BENCHMARK
from benchmarks.cowork_bench.adapter import CoworkAdapter, CoworkOptions, add_options
from harness.adapter import BenchmarkAdapter
from harness.errors import RefusalError
from harness.runtime import RunContext

ADAPTER_KEY = pytest.StashKey[CoworkAdapter]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def adapter_of(config: pytest.Config) -> CoworkAdapter:
    if ADAPTER_KEY not in config.stash:
        config.stash[ADAPTER_KEY] = CoworkAdapter(config)
    return config.stash[ADAPTER_KEY]


def pytest_harness_adapters(config: pytest.Config) -> list[BenchmarkAdapter]:
    return [adapter_of(config)]


def pytest_configure(config: pytest.Config) -> None:
    """Validate the options before anything uses them: one line, exit 2."""
    if config.option.help or config.option.version:
        return
    try:
        CoworkOptions.from_config(config)
    except RefusalError as exc:
        pytest.exit(str(exc), returncode=exc.exit_code)


def pytest_harness_admit(config: pytest.Config, run: RunContext) -> None:
    adapter = run.adapters.get(BENCHMARK)
    if isinstance(adapter, CoworkAdapter):
        adapter.admit(run)
