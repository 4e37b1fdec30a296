"""Benchmarks and the report register with the core; the core imports neither.

A benchmark package declares a :class:`BenchmarkRegistration` and names it in the
``harness.benchmarks`` entry-point group (``pyproject.toml``); the report declares a
:class:`ReportPlugin` in the ``harness.report`` group. The core loads them by name only.
When the distribution's entry points are missing (a source checkout whose editable
install predates them), the built-in lists below are used, by name as well.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

BENCHMARKS_GROUP = "harness.benchmarks"
REPORT_GROUP = "harness.report"

# Used only when no distribution declares the groups above (same values as pyproject.toml).
BUILTIN_BENCHMARKS: dict[str, str] = {
    "programbench": "benchmarks.programbench.registration:REGISTRATION",
    "cowork": "benchmarks.cowork_bench.registration:REGISTRATION",
    "harbor": "benchmarks.harbor.registration:REGISTRATION",
}
BUILTIN_REPORT = "reports.plugin:REPORT"


@dataclass(frozen=True)
class ImageStep:
    """One local image a benchmark builds for ``python -m harness.sandbox.images``."""

    label: str
    build: Callable[[], object]


@dataclass(frozen=True)
class BenchmarkRegistration:
    """What a benchmark contributes to the core besides its pytest adapter."""

    name: str
    # ``harness <name> ...``: (module, function, help), imported only when run.
    command: tuple[str, str, str] | None = None
    images: Sequence[ImageStep] = field(default_factory=tuple)


class ReportPlugin(Protocol):
    """The report as the core calls it (live progress, the end-of-run report, commands)."""

    commands: dict[str, tuple[str, str, str]]

    def progress(self, total: int, stream: Any, *, is_tty: bool) -> Any: ...

    def write_report(self, run_root: Path, *, compare_to: Path | None) -> Path | None: ...

    # Optional: ``preload()`` imports and compiles ahead what ``write_report`` needs, for a
    # process that forks many runs (the tests' fork server calls it when present).


def _load(value: str) -> Any:
    module_name, _, attr = value.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split(".") if attr else ():
        obj = getattr(obj, part)
    return obj


def _entry_points(group: str) -> dict[str, str]:
    return {ep.name: ep.value for ep in metadata.entry_points(group=group)}


def benchmark_entries() -> dict[str, str]:
    """name -> ``module:attribute`` of every registered benchmark (entry points first)."""
    return _entry_points(BENCHMARKS_GROUP) or dict(BUILTIN_BENCHMARKS)


def benchmarks() -> list[BenchmarkRegistration]:
    """Registered benchmarks that import here; one that does not (a missing extra such as
    ``harness[programbench]``) is left out with one line on stderr."""
    out: list[BenchmarkRegistration] = []
    for name, value in benchmark_entries().items():
        try:
            reg = _load(value)
        except ImportError as exc:
            sys.stderr.write(f"harness: benchmark {name!r} not available ({exc})\n")
            continue
        if not isinstance(reg, BenchmarkRegistration):
            raise TypeError(f"entry point {name}={value} is not a BenchmarkRegistration")
        out.append(reg)
    return out


def benchmark_commands() -> dict[str, tuple[str, str, str]]:
    """``harness`` sub-commands the benchmarks contribute, without importing the benchmarks'
    heavy modules (registration modules are small)."""
    return {r.name: r.command for r in benchmarks() if r.command is not None}


def report_plugin() -> ReportPlugin | None:
    """The report plugin, or None when none is installed (the run then writes no report)."""
    values = list(_entry_points(REPORT_GROUP).values()) or [BUILTIN_REPORT]
    try:
        plugin: ReportPlugin = _load(values[0])
    except ImportError:
        return None
    return plugin


def plugin_commands() -> dict[str, tuple[str, str, str]]:
    """``harness`` sub-commands contributed by the report and the benchmarks."""
    report = report_plugin()
    out = dict(report.commands) if report is not None else {}
    out.update(benchmark_commands())
    return out
