"""A run's admission steps, in one explicit order (issue 42).

The controller runs :func:`admit` once (the plugin hands it to ``Controller.admit``: the
controller imports no plugin), after the manifest and the plan are written (and a resume's
plan made: :mod:`harness.runner.admission`) and before any worker starts. Each
step may raise :class:`harness.core.errors.RefusalError` to refuse the run (one line,
exit 2; the steps after it do not run) and records what it decided in
``run.manifest.extra``. The order, first to last:

1. ``engine_options``: the engine options parse, and the agent's relays may run on those
   engines (:mod:`harness.runner.engine_admission`); the options alone: nothing is
   contacted before them.
2. ``benchmarks``: each benchmark's own admission, the ``pytest_harness_admit`` hook of its
   conftest (pluggy's order among them), e.g. ProgramBench's grader version and instance
   order, Cowork's run images. Cheap refusals of a benchmark come before any agent server,
   campaign or engine is contacted.
3. ``phase_deadlines``: the phase deadlines read and recorded
   (:mod:`harness.runner.deadline_plugin`).
4. ``model_pacing``: the model pacing policy read, recorded and configured
   (:mod:`harness.runner.pacing_plugin`).
5. ``agent``: the agent under test built (its kind, options and model tapes), its seed
   gate and its agent server's preflight (:mod:`harness.runner.agent_plugin`).
6. ``budget``: the budget recorded and, unless a dry run, the campaign's supervisor
   started (:mod:`harness.runner.budget_plugin`).
7. ``engines``: the engines probed, sized and leased, or the local one asked for its
   version (:mod:`harness.runner.engine_plugin`).
8. ``image_policy``: the image policy recorded, the digest pins and an ancestor's images
   checked (:mod:`harness.runner.pull_plugin`).
9. ``lease_and_sweep``: the run's lease taken, then the start-up sweep of stale runs
   (:mod:`harness.runner.sandbox_hooks`).
10. ``sandbox_runtime``: a sandbox runtime the daemon does not know is refused
    (:mod:`harness.runner.sandbox_fixtures`).

This is the order the admission hooks had when each plugin implemented
``pytest_harness_admit`` (pluggy calls them last-registered first, the option checks
``tryfirst``, a benchmark's conftest registered after the runner's plugins); the runner's
plugins no longer implement the hook (``tests/runner/test_admission_pipeline.py``), so a
new step is added here, at a stated place, never by registration order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from harness.runner.agent_plugin import admit_agent
from harness.runner.budget_plugin import admit_budget
from harness.runner.deadline_plugin import admit_deadlines
from harness.runner.engine_admission import check_engine_options
from harness.runner.engine_plugin import admit_engines
from harness.runner.pacing_plugin import admit_pacing
from harness.runner.pull_plugin import admit_images
from harness.runner.sandbox_fixtures import admit_runtime
from harness.runner.sandbox_hooks import admit_sweeps

if TYPE_CHECKING:
    from harness.runner.instance import RunContext

AdmissionStep = Callable[[pytest.Config, "RunContext"], None]


def admit_benchmarks(config: pytest.Config, run: RunContext) -> None:
    """The benchmarks' own admission: their conftests' ``pytest_harness_admit``."""
    config.hook.pytest_harness_admit(config=config, run=run)


STEPS: tuple[tuple[str, AdmissionStep], ...] = (
    ("engine_options", check_engine_options),
    ("benchmarks", admit_benchmarks),
    ("phase_deadlines", admit_deadlines),
    ("model_pacing", admit_pacing),
    ("agent", admit_agent),
    ("budget", admit_budget),
    ("engines", admit_engines),
    ("image_policy", admit_images),
    ("lease_and_sweep", admit_sweeps),
    ("sandbox_runtime", admit_runtime),
)


def admit(config: pytest.Config, run: RunContext,
          steps: tuple[tuple[str, AdmissionStep], ...] = STEPS) -> None:
    """Run the admission ``steps`` in order; the first refusal ends the admission."""
    for _name, step in steps:
        step(config, run)
