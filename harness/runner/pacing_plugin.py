"""The model gateway's pacing options (a pytest plugin; :mod:`harness.model_proxy.pacing`):
checked when parsed (:mod:`harness.runner.options`), recorded at admission, in force in the
controller and in every worker, over the run's shared pacing state (its state folder)."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.runner.options import PACING
from harness.runner.worker import STATE_KEY

if TYPE_CHECKING:
    from harness.model_proxy.pacing import PacingPolicy
    from harness.runner.instance import RunContext

_CONFIGURED: set[str] = set()  # run roots this process configured the pacer for


def policy_of(config: pytest.Config) -> PacingPolicy:
    """The options as a policy (a bad value was refused when parsed, in one line)."""
    from harness.model_proxy.pacing import PacingPolicy

    values: dict[str, float | int | None] = {}
    for dest, (_, default, _, _) in PACING.items():  # each checked when parsed
        raw = config.getoption(dest, None)
        values[dest] = default if raw is None else raw
    concurrency, rpm = values["model_concurrency"], values["model_rpm"]
    return PacingPolicy(
        concurrency=None if concurrency is None else int(concurrency),
        rpm=None if rpm is None else float(rpm),
        wait_max_s=float(values["model_wait_max_s"] or 0),
        retries=int(values["model_retries"] or 0),
        retry_budget=int(values["model_retry_budget"] or 0),
        stream_idle_s=float(values["model_stream_idle_s"] or 0))


def configure(config: pytest.Config, run_root: Path) -> None:
    """This process's gateways pace under the run's options and shared state (once)."""
    from harness.core.layout import state_dir
    from harness.model_proxy.pacing import configure_run_pacer, pacing_dir

    key = str(run_root)
    if key in _CONFIGURED:
        return
    configure_run_pacer(policy_of(config), pacing_dir(state_dir(run_root)))
    _CONFIGURED.add(key)


def admit_pacing(config: pytest.Config, run: RunContext) -> None:
    policy = policy_of(config)
    if run.manifest is not None:
        run.manifest.extra.model_pacing = policy.record()
    configure(config, run.run_root)


@pytest.fixture(autouse=True)
def harness_model_pacing(request: pytest.FixtureRequest) -> Generator[None, None, None]:
    """In a worker, the run's pacing before the instance's agent starts its gateway."""
    state = request.node.stash.get(STATE_KEY, None)
    if state is not None and not state.ctx.dry_run:
        configure(request.config, Path(state.ctx.run.run_root))
    yield
