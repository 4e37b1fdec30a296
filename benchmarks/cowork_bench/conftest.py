"""Cowork Bench as a pytest benchmark: options, the adapter, admission.

    pytest benchmarks/cowork_bench --cowork-root PATH --agent oracle -n 2
    pytest benchmarks/cowork_bench --cowork-root PATH --dry-run

See ``adapter.py`` (options, provenance gate) and ``instance.py`` (one instance).
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.cowork_bench import BENCHMARK
from benchmarks.cowork_bench.adapter import CoworkAdapter, CoworkOptions, add_options
from harness.adapter import BenchmarkAdapter
from harness.errors import RefusalError
from harness.runtime import RunContext
from harness.sandbox import sweep

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


def pytest_harness_worker_crashed(config: pytest.Config, run: RunContext, worker_id: str) -> None:
    """A dead worker cannot tear its instance down: remove what it left (its labels only)."""
    if BENCHMARK in run.adapters and not run.dry_run:
        removed = sweep(run.run_id, worker_id)
        _cowork_extra(run).setdefault("crash_sweeps", []).append(
            {"worker": worker_id, "removed": removed}
        )


def pytest_harness_session_finish(
    config: pytest.Config, run: RunContext, summary: dict[str, Any]
) -> None:
    """Every instance removes its own containers and network; prove the run left nothing."""
    if BENCHMARK in run.adapters and not run.dry_run:
        _cowork_extra(run)["final_sweep"] = {"removed": sweep(run.run_id)}


def _cowork_extra(run: RunContext) -> dict[str, Any]:
    if run.manifest is None:
        return {}
    extra: dict[str, Any] = run.manifest.extra.setdefault("cowork", {})
    return extra
