"""The small interface between the runner and a benchmark.

A benchmark lives under ``benchmarks/<name>/``: its ``conftest.py`` returns an adapter from
the ``pytest_harness_adapters`` hook, and its test module holds one test function that
requests the ``harness_instance`` fixture and carries ``pytest.mark.harness_benchmark(name)``.
The runner parametrizes that function with one item per instance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from harness.core.outcomes import Outcome, attempt_id, validate_task_id

if TYPE_CHECKING:
    import pytest


@dataclass(frozen=True)
class InstanceSpec:
    """One benchmark instance as the runner sees it."""

    instance_id: str
    # Attribute markers: {"difficulty": "easy"} gives the item a ``difficulty`` marker with
    # ``value='easy'``, so ``-m "difficulty('easy')"`` selects it.
    markers: Mapping[str, str | Sequence[str]] = field(default_factory=dict)
    # Extra words ``-k`` matches (attribute values are added automatically).
    keywords: Sequence[str] = ()
    # Adapter payload (kept out of the runner's files).
    data: Any = None
    # Which of K attempts at the task this is (``--attempts K``, K > 1), set by the runner;
    # None for a run with one attempt per task. ``instance_id`` stays the task's own id.
    sample: int | None = None

    def __post_init__(self) -> None:
        validate_task_id(self.instance_id)
        if self.sample is not None and (
            isinstance(self.sample, bool) or not isinstance(self.sample, int) or self.sample < 1
        ):
            raise ValueError(
                f"{self.instance_id}: attempt {self.sample!r} is not a positive integer"
            )

    @property
    def key_id(self) -> str:
        """The run's id of this instance: the task's id, or ``<task id>@<k>`` for attempt k
        (its instance key, folder and row name it)."""
        return attempt_id(self.instance_id, self.sample)

    def attempt(self, sample: int) -> InstanceSpec:
        """This task's attempt ``sample`` (1-based) of a run with K attempts per task."""
        return replace(self, sample=sample)

    def marker_values(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for name, value in self.markers.items():
            values = [value] if isinstance(value, str) else list(value)
            out.extend((name, str(v)) for v in values)
        return out


class BenchmarkAdapter:
    """Base class of benchmark adapters; override what the benchmark needs."""

    name: str = "benchmark"
    marker_names: Sequence[str] = ()
    # A run of this benchmark must name its agent (``--agent``); False for test benchmarks.
    needs_agent: bool = True
    # The run keeps ``monitor.json`` (progress, disk, stop reason) even without a budget: a
    # benchmark whose specification lists the file (harness.runner.progress_monitor).
    writes_monitor: bool = False
    # The agent server profile the benchmark pins (settings key -> value, checked against
    # ``--settings-path``) and the tools its solve task disables (harness.agents.gateway.profile).
    server_profile: Mapping[str, str] = {}
    solve_task_disabled_tools: tuple[str, ...] = ()
    # Instances of the whole benchmark (the denominator of its published score); a run that
    # selects fewer says "N of SIZE tasks: not the benchmark score" with every headline.
    benchmark_size: int | None = None
    # The ledger ``status`` word of each outcome, in this benchmark's own vocabulary; an
    # outcome left out is recorded under the runner's own word (``Outcome.value``).
    status_vocabulary: Mapping[Outcome, str] = {}
    # Score at or above which an instance is "near-resolved" (almost); None: no such notion.
    near_resolved_at: float | None = None
    # Its tasks serve tools on their internal network that an agent server outside it reaches
    # through a relay container (harness.agents.gateway.tool_route): such a run needs an
    # engine of this machine.
    tool_routes: bool = False

    def instances(self, config: pytest.Config) -> list[InstanceSpec]:
        raise NotImplementedError

    def version(self) -> str:
        return "unversioned"

    def result_config(self, config: pytest.Config) -> dict[str, Any]:
        """Options of this benchmark that change results (they enter the fingerprint)."""
        return {}

    def needs_engine(self, config: pytest.Config) -> bool:
        """True when this run's instances use a Docker engine (a sandbox, an image, the
        scorer's container): admission then refuses a run whose engine does not answer."""
        return True

    def selectors_given(self, config: pytest.Config) -> bool:
        """True when the user narrowed the selection with this benchmark's own options."""
        return False

    def status_for(self, outcome: Outcome, resolved: bool | None) -> str:
        """The ledger ``status`` of an outcome in this benchmark's vocabulary."""
        return self.status_vocabulary.get(outcome, outcome.value)
