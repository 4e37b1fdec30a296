"""Hooks the runner adds to pytest (registered by ``harness.runner.plugin``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from harness.core.adapter import BenchmarkAdapter
    from harness.core.models import TaskRow
    from harness.runner.instance import RunContext


@pytest.hookspec
def pytest_harness_adapters(config: pytest.Config) -> list[BenchmarkAdapter]:  # type: ignore[empty-body]
    """Return the benchmark adapters this conftest provides (results are concatenated)."""


@pytest.hookspec
def pytest_harness_result_config(config: pytest.Config) -> dict[str, Any]:  # type: ignore[empty-body]
    """Options that change results; merged into the run's config (and its fingerprint)."""


@pytest.hookspec
def pytest_harness_admit(config: pytest.Config, run: RunContext) -> None:
    """A benchmark's own admission: controller, once, after the manifest is written and
    before any worker starts, as the ``benchmarks`` step of
    :mod:`harness.runner.admission_pipeline` (second: after the engine options are checked,
    before the runner's other steps). The runner's own steps are named there, never
    implemented as this hook.

    Raise :class:`harness.core.errors.RefusalError` to refuse the run (preflights, admission).
    Record provenance in ``run.manifest.extra``.
    """


@pytest.hookspec
def pytest_harness_row_written(config: pytest.Config, row: TaskRow) -> None:
    """Controller, after a row was appended to the ledger."""


@pytest.hookspec
def pytest_harness_worker_crashed(config: pytest.Config, run: RunContext, worker_id: str) -> None:
    """Controller, after an xdist worker died (sweep what it left)."""


@pytest.hookspec
def pytest_harness_session_results(
    config: pytest.Config, run: RunContext, rows: dict[str, TaskRow],
    append: Callable[[TaskRow], None],
) -> None:
    """Controller, after the last instance and before the summary: session-level scoring
    (e.g. a batch official eval) appends superseding rows with ``append``."""


@pytest.hookspec
def pytest_harness_session_finish(
    config: pytest.Config, run: RunContext, summary: dict[str, Any]
) -> None:
    """Controller, after the last row and before the manifest is finalized."""
