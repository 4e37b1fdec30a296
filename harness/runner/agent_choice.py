"""The agent option (``--agent`` and the settings of the agent under test), read once for
the run into :class:`AgentChoice`, and the trial it is handed to (issue 42).

The run reads the agent option here and nowhere else: the trial gets the choice
(:func:`run_trial`, a declared benchmark's test body), builds nothing from the command line
itself, and shows a benchmark the chosen kind's capabilities and seed
(:attr:`harness.runner.trial.Trial.agent`, :attr:`~harness.runner.trial.Trial.agent_seed`);
admission, the engines' checks and the row's secret scan read the same choice.
``tests/runner/test_agent_choice.py`` fails the suite on any other reader of these options.

``--model-record DIR`` / ``--model-replay DIR`` (``--replay-order strict|sequence``): the
agent's model calls recorded or replayed at the model gateway
(:mod:`harness.model_proxy.tape`), for the kinds whose calls pass through the harness
(:func:`build_agent`).

This module loads at collection: it imports no pydantic model.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness.core.errors import RefusalError
from harness.runner.options import GATEWAY_URL_ENV, read_once
from harness.runner.trial import AgentSeed, live

if TYPE_CHECKING:  # agents and rows load when a run starts, not at collection
    from harness.agents.base import Agent, AgentOptions
    from harness.model_proxy.tape import TapeConfig
    from harness.runner.instance import InstanceContext

# A replayed command agent's gateway: an upstream it never contacts and a key it never uses
# (the gateway's checks want both; in replay neither is read).
REPLAY_UPSTREAM = "http://127.0.0.1:9/replay-only"
REPLAY_KEY_ENV = "HARNESS_REPLAY_HOLDS_NO_KEY"
FREE_KINDS = ("nop", "oracle")  # kinds that call no model: nothing paid burns
_STASH = pytest.StashKey["AgentChoice"]()


@dataclass(frozen=True)
class AgentChoice:
    """The agent under test as the command line chose it (read once: :func:`agent_choice`)."""

    given: str | None  # ``--agent`` as given (None: not given)
    dry_run: bool
    env: tuple[str, ...]  # ``--agent-env`` names (their values are the runner's secrets)
    repo: str | None  # ``--agent-repo``: the agent's checkout
    allow_dirty_seed: bool
    model_upstream: str | None
    model_replay: str | None
    settings: tuple[tuple[str, Any], ...]  # the rest of :class:`AgentOptions`, as given

    @property
    def kind(self) -> str:
        """The run's record of the kind: as given, ``gateway`` for a dry run, else ""."""
        if self.given is not None:
            return self.given
        return "gateway" if self.dry_run else ""

    @property
    def runs(self) -> str:
        """The kind that runs an instance: :attr:`kind`, or ``nop`` when none is chosen."""
        return self.kind or "nop"

    @property
    def spends_money(self) -> bool:
        """Whether the run spends model money: not a dry run, not served from a recording
        (``--model-replay``), and an agent that calls a model (none chosen counts as one:
        the agent's admission then refuses the run)."""
        return not self.dry_run and not self.model_replay and self.kind not in FREE_KINDS

    @property
    def seed(self) -> AgentSeed | None:
        """The agent's own checkout (``--agent-repo``), None when not given."""
        return None if not self.repo else AgentSeed(self.repo, self.allow_dirty_seed)

    @cached_property
    def options(self) -> AgentOptions:
        from harness.agents.base import AgentOptions

        return AgentOptions(**dict(self.settings), env=list(self.env),
                            model_upstream=self.model_upstream)


def agent_choice(config: pytest.Config) -> AgentChoice:
    """The run's :class:`AgentChoice` (read from ``config`` once, then kept on it)."""
    return read_once(config, _STASH, _read)


def _read(config: pytest.Config) -> AgentChoice:
    given = config.getoption("agent")
    settings = {
        "command": config.getoption("agent_command"),
        "gateway_url": config.getoption("gateway_url") or os.environ.get(GATEWAY_URL_ENV),
        "poll_interval_s": _float_option(config, "gateway_poll_sec"),
        "solve_model": config.getoption("solve_model"),
        "allow_models": tuple(config.getoption("allow_model")),
        "agent_config": config.getoption("agent_config"),
        "model_key_env": config.getoption("model_key_env"),
        "model_prices": config.getoption("model_prices"),
        "per_task_limit_usd": _float_option(config, "per_task_limit_usd"),
        "kill_after_s": _float_option(config, "agent_kill_after"),
        "exec_margin_s": _float_option(config, "agent_exec_margin"),
    }
    return AgentChoice(
        given=None if given is None else str(given), dry_run=bool(config.getoption("dry_run")),
        env=tuple(config.getoption("agent_env")), repo=config.getoption("agent_repo") or None,
        allow_dirty_seed=bool(config.getoption("allow_dirty_seed")),
        model_upstream=config.getoption("model_upstream"),
        model_replay=config.getoption("model_replay"), settings=tuple(settings.items()))


def run_trial(ctx: InstanceContext, request: pytest.FixtureRequest) -> None:
    """A declared benchmark's test body (``harness.api.run_trial``): this instance's trial,
    handed the agent under test (the agent the ``harness_agent`` fixture built from the
    choice once for this process; none in a dry run, which builds no agent)."""
    choice = agent_choice(request.config)
    agent = None if ctx.dry_run else request.getfixturevalue("harness_agent")
    trial_with(choice, agent, ctx, request)


def trial_with(choice: AgentChoice, agent: Agent | None, ctx: InstanceContext,
               request: pytest.FixtureRequest) -> None:
    """The trial of ``ctx`` with the chosen agent: its kind, the names of the runner's
    variables it gets, its checkout, and ``agent``, built from the choice."""
    live(ctx, request, agent, choice.runs, choice.env, choice.seed)


def tape_config(config: pytest.Config) -> TapeConfig | None:
    """``--model-record`` / ``--model-replay`` (None: neither); a bad combination is a
    one-line :class:`RefusalError`."""
    record, replay = config.getoption("model_record"), config.getoption("model_replay")
    order = config.getoption("replay_order")
    budget = config.getoption("model_record_budget")
    if not (record or replay or order is not None or budget is not None):
        return None
    from harness.model_proxy.tape import ORDERS, TapeConfig

    def refuse(message: str) -> RefusalError:
        return RefusalError(message, stage="agent", reason="agent_options")

    if order is not None and order not in ORDERS:
        raise refuse(f"--replay-order {order!r}: use strict or sequence")
    if record and replay:
        raise refuse("--model-record and --model-replay: choose one (a replay records "
                     "nothing; record again with --model-record DIR alone)")
    if order is not None and not replay:
        raise refuse("--replay-order needs --model-replay DIR")
    if replay:
        if config.getoption("model_upstream"):
            raise refuse("--model-replay serves every call from its records and never "
                         "contacts an upstream: drop --model-upstream")
        return TapeConfig("replay", Path(replay).absolute(), order or "strict")
    if budget is not None and not record:
        raise refuse("--model-record-budget needs --model-record DIR")
    if record:
        calls, size = _record_budget(budget, refuse)
        return TapeConfig("record", Path(record).absolute(), max_calls=calls, max_bytes=size)
    return None


def _record_budget(given: str | None, refuse: Callable[[str], RefusalError]) -> tuple[int, int]:
    from harness.model_proxy.tape import MAX_RECORD_BYTES, MAX_RECORD_CALLS

    if given is None:
        return MAX_RECORD_CALLS, MAX_RECORD_BYTES
    parts = given.split(",")
    if len(parts) == 2 and all(p.strip().isdigit() and int(p) > 0 for p in parts):
        return int(parts[0]), int(parts[1])
    raise refuse(f"--model-record-budget {given!r}: give CALLS,BYTES as two positive whole "
                 "numbers, e.g. 2000,67108864")


def build_agent(kind: str, options: AgentOptions, tape: TapeConfig | None) -> Agent:
    """The agent of ``kind``; under a tape, one whose model calls it records or replays
    (ValueError naming the option to fix when the kind's calls cannot be)."""
    from harness.agents.base import agent_class, make_agent, tape_kinds

    if tape is None:
        return make_agent(kind, options)
    flag = f"--model-{tape.mode}"
    route = agent_class(kind).tape_route
    if route is None:
        raise ValueError(f"{flag}: agent kind {kind!r} makes its model calls outside the "
                         f"harness; use {', '.join(tape_kinds())}")
    if route == "model_gateway" and tape.mode == "replay":
        opts = options.model_copy(update={"model_upstream": REPLAY_UPSTREAM,
                                          "model_key_env": REPLAY_KEY_ENV})
        return make_agent(kind, opts, {**os.environ, REPLAY_KEY_ENV: "replay-holds-no-key"})
    if route == "model_gateway" and not options.model_upstream:
        raise ValueError(f"{flag}: the {kind} agent's model calls reach the harness only "
                         f"through the model gateway: add --model-upstream URL")
    agent = make_agent(kind, options)
    problem = agent.tape_problem(tape.mode)
    if problem:
        raise ValueError(problem)
    return agent


def _float_option(config: pytest.Config, name: str) -> float | None:
    """A positive number of seconds or dollars (checked when parsed)."""
    raw = config.getoption(name)
    return None if raw is None else float(raw)


__all__ = ["AgentChoice", "agent_choice", "build_agent", "run_trial", "tape_config"]
