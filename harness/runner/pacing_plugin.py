"""The model gateway's pacing options (a pytest plugin; :mod:`harness.model_proxy.pacing`):
validated and recorded at admission, in force in the controller and in every worker, over
the run's shared pacing state (its state folder)."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.core.errors import RefusalError
from harness.runner.worker import STATE_KEY

if TYPE_CHECKING:
    from harness.model_proxy.pacing import PacingPolicy
    from harness.runner.instance import RunContext

# option dest -> (flag, default, integer, help)
OPTIONS: dict[str, tuple[str, float | None, bool, str]] = {
    "model_concurrency": ("--model-concurrency", None, True,
                          "model calls in flight at once across the run, all instances and "
                          "workers (default: no cap)"),
    "model_rpm": ("--model-rpm", None, False,
                  "model calls sent per minute across the run (default: no limit)"),
    "model_wait_max_s": ("--model-wait-max-s", 600.0, False,
                         "the longest one model call waits for its turn and out 429s before "
                         "the agent gets the provider's answer (default 600)"),
    "model_retries": ("--model-retries", 3, True,
                      "retries of one model call after a 5xx or a failed connection "
                      "(default 3)"),
    "model_retry_budget": ("--model-retry-budget", 200, True,
                           "retries of model calls across the whole run (default 200)"),
    "model_stream_idle_s": ("--model-stream-idle-s", 120.0, False,
                            "cut a model stream silent this long; the instance is "
                            "infrastructure when the agent cannot go on (default 120)"),
}
_CONFIGURED: set[str] = set()  # run roots this process configured the pacer for


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("model gateway pacing")
    for dest, (flag, _, _, text) in OPTIONS.items():
        group.addoption(flag, dest=dest, default=None, metavar="N", help=text)


def policy_of(config: pytest.Config) -> PacingPolicy:
    """The options as a policy; a bad value is a one-line refusal naming the flag."""
    from harness.model_proxy.pacing import PacingPolicy

    values: dict[str, float | int | None] = {}
    for dest, (flag, default, integer, _) in OPTIONS.items():
        raw = config.getoption(dest, None)
        if raw is None:
            values[dest] = default
            continue
        try:
            value: float | int = int(raw) if integer else float(raw)
        except ValueError:
            value = -1
        floor = 0 if dest in ("model_retries", "model_retry_budget") else 1e-9
        if value < floor:
            kind = "a whole number" if integer else "a number"
            raise RefusalError(f"{flag} {raw!r} is not {kind} of at least "
                               f"{floor if floor else 0:g}; pass e.g. {flag} 4",
                               stage="agent", reason="agent_options")
        values[dest] = value
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
    policy = policy_of(config)  # a bad option is refused before anything runs
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
