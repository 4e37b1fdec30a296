"""pytest wiring of agents: ``--agent`` and its options (registered and checked by
:mod:`harness.runner.options`), the controller's preflights (seed gate, target actor,
runtime attestation: recorded first, then enforced), and the ``harness_agent`` fixture (one
instance's run of the agent: :mod:`harness.runner.agent_run`).

``--model-record DIR`` / ``--model-replay DIR`` (``--replay-order strict|sequence``): the
agent's model calls recorded or replayed at the model gateway
(:mod:`harness.model_proxy.tape`), for the kinds whose calls pass through the harness: a
``command`` or ``host-command`` agent behind the gateway, and ``mini-swe-agent`` (its
litellm calls then go through an in-process gateway); the fixture registers each agent's
tape, and :func:`harness.runner.agent_run.run_agent` opens the instance's session. A replay needs no ``--model-upstream``
(refused with it) and no key: the command agents get a gateway with neither.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness.agents.kinds import AGENT_KINDS
from harness.core.errors import RefusalError
from harness.runner.agent_run import TAPES
from harness.runner.options import GATEWAY_URL_ENV

if TYPE_CHECKING:  # agents and rows load when a run starts, not at collection
    from harness.agents.base import Agent, AgentOptions
    from harness.model_proxy.tape import TapeConfig
    from harness.runner.instance import RunContext

# A replayed command agent's gateway: an upstream it never contacts and a key it never uses
# (the gateway's checks want both; in replay neither is read).
REPLAY_UPSTREAM = "http://127.0.0.1:9/replay-only"
REPLAY_KEY_ENV = "HARNESS_REPLAY_HOLDS_NO_KEY"


def agent_kind(config: pytest.Config) -> str:
    kind = config.getoption("agent")
    if kind is None:
        return "gateway" if config.getoption("dry_run") else ""
    return str(kind)


def agent_options(config: pytest.Config) -> AgentOptions:
    from harness.agents.base import AgentOptions

    return AgentOptions(
        command=config.getoption("agent_command"),
        env=list(config.getoption("agent_env")),
        gateway_url=config.getoption("gateway_url") or os.environ.get(GATEWAY_URL_ENV),
        poll_interval_s=_float_option(config, "gateway_poll_sec"),
        solve_model=config.getoption("solve_model"),
        allow_models=list(config.getoption("allow_model")),
        agent_config=config.getoption("agent_config"),
        model_upstream=config.getoption("model_upstream"),
        model_key_env=config.getoption("model_key_env"),
        model_prices=config.getoption("model_prices"),
        per_task_limit_usd=_float_option(config, "per_task_limit_usd"),
        kill_after_s=_float_option(config, "agent_kill_after"),
        exec_margin_s=_float_option(config, "agent_exec_margin"),
    )


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


def pytest_harness_result_config(config: pytest.Config) -> dict[str, Any]:
    """Agent options that change results (names only: never a secret value)."""
    allow = sorted(set(config.getoption("allow_model")))
    return {
        **({"agent.allow_models": allow} if allow else {}),  # absent: as before the option
        "agent.kind": agent_kind(config),
        "agent.solve_model": config.getoption("solve_model"),
        "agent.command": config.getoption("agent_command"),
        "agent.env": sorted(config.getoption("agent_env")),
        "agent.config": config.getoption("agent_config"),
        "agent.model_upstream": config.getoption("model_upstream"),
        "agent.model_prices": config.getoption("model_prices"),
        "agent.per_task_limit_usd": config.getoption("per_task_limit_usd"),
        # a replay's rows cost $0 (absent without it: as before the option)
        **({"agent.model_replay": str(Path(replay).absolute()),
            "agent.replay_order": config.getoption("replay_order") or "strict"}
           if (replay := config.getoption("model_replay")) else {}),
    }


EVOLVED_VOLUME_ENV = "OBO_ALLOW_EVOLVED_VOLUME"  # the specification's name of the waiver


def skew_waived(config: pytest.Config) -> bool:
    """``--allow-runtime-skew``, or the specification's ``OBO_ALLOW_EVOLVED_VOLUME=1``."""
    return bool(config.getoption("allow_runtime_skew")) or os.environ.get(
        EVOLVED_VOLUME_ENV, "").strip() == "1"


def admit_agent(config: pytest.Config, run: RunContext) -> None:
    from harness.agents.base import agent_class  # agents load when a run starts
    from harness.core.models import ManifestExtra

    kind = agent_kind(config)
    if not kind and not any(a.needs_agent for a in run.adapters.values()):
        kind = "nop"
    if not kind:
        raise RefusalError(f"choose the agent under test with --agent "
                           f"{'|'.join(AGENT_KINDS)}", stage="agent", reason="agent_missing")
    options = agent_options(config)
    tape = tape_config(config)
    try:
        remote_server = agent_class(kind).remote_server
    except ValueError as exc:
        raise RefusalError(str(exc), stage="agent", reason="agent_options") from exc
    if run.dry_run and remote_server and not options.gateway_url and tape is None:
        if config.getoption("settings_path"):  # the profile file alone, no server to ask
            _profile_preflight(config, run, None, _writer(run))
        return  # a dry run only writes the task bodies a gateway would get
    try:
        agent = build_agent(kind, options, tape)
        if tape is not None:
            tape.prepare()
    except ValueError as exc:  # TapeError is one
        raise RefusalError(str(exc), stage="agent", reason="agent_options") from exc
    extra = run.manifest.extra if run.manifest is not None else ManifestExtra()
    extra.agent = {"kind": kind, "gateway_url": options.gateway_url,
                   "solve_model": config.getoption("solve_model"),
                   "command": options.command, "env_names": sorted(options.env),
                   **({"allow_models": options.allow_models} if options.allow_models else {}),
                   **({f"model_{tape.mode}": str(tape.directory)} if tape else {}),
                   **({"replay_order": tape.order} if tape and tape.mode == "replay" else {})}
    write = _writer(run)
    repo = config.getoption("agent_repo")
    head: str | None = None
    version: str | None = None
    if repo:
        from harness.agents.provenance import require_seed, seed_gate
        from harness.core.git import repo_provenance

        prov = repo_provenance(repo)
        gate = seed_gate(prov, allow_dirty_seed=config.getoption("allow_dirty_seed"),
                         expect=config.getoption("expect_agent_commit"))
        extra.agent_source = prov.model_dump(mode="json", by_alias=True)
        extra.seed_gate = gate.model_dump(mode="json", by_alias=True)
        write()
        require_seed(gate, prov)
        head, version = prov.head, getattr(prov, "version", None)
    missing = agent.missing_env()
    if missing:
        raise RefusalError(f"--agent-env {', '.join(missing)}: not set in this environment; "
                           f"export it or drop the option", stage="agent",
                           reason="agent_env_missing")
    if remote_server and options.gateway_url:
        _gateway_preflight(config, run, options.gateway_url, repo, head, version, write)
    elif remote_server and not run.dry_run:
        raise RefusalError(f"--agent {kind} needs --gateway-url URL (or ${GATEWAY_URL_ENV})",
                           stage="agent", reason="agent_options")


def _writer(run: RunContext) -> Any:
    from harness.run.manifest import write_manifest

    def write() -> None:
        if run.manifest is not None:
            write_manifest(run.manifest)

    return write


def _profile_preflight(config: pytest.Config, run: RunContext, live: Any,
                       write: Any) -> None:
    """``--settings-path``: the profile the benchmarks pin and every model slot, against
    the running server's settings (``live``) when there is one; recorded, then refused on a
    problem."""
    from harness.agents.gateway.profile import SINGLE_MODEL_TOOLS, check_profile, require_profile

    decisions = {k: v for a in run.adapters.values() for k, v in a.server_profile.items()}
    disabled = [t for a in run.adapters.values() if a.server_profile
                for t in a.solve_task_disabled_tools]
    check = check_profile(config.getoption("settings_path"),
                          solve_model=config.getoption("solve_model"), live=live,
                          decisions=decisions,
                          must_disable=SINGLE_MODEL_TOOLS if decisions else (),
                          disabled_tools=disabled)
    if run.manifest is not None:
        run.manifest.extra.settings_profile = check.model_dump(mode="json")
        write()
    require_profile(check)


def _gateway_preflight(config: pytest.Config, run: RunContext, url: str, repo: str | None,
                       head: str | None, version: str | None, write: Any) -> None:
    from harness.agents.gateway.client import GatewayClient
    from harness.agents.gateway.preflight import (
        attest_runtime,
        preflight_target_actor,
        read_settings,
        require_runtime,
    )
    from harness.core.models import ManifestExtra

    extra = run.manifest.extra if run.manifest is not None else ManifestExtra()
    model = config.getoption("solve_model")

    def record(found: dict[str, Any]) -> None:  # on disk before any refusal
        extra.target_runtime_actor = found
        write()

    with GatewayClient(url) as client:
        profile = config.getoption("settings_path")
        settings = read_settings(client, record=record) if model or profile else None
        if model:  # one read of the server's settings for both checks
            preflight_target_actor(client, model, record=record, settings=settings)
        if profile:
            _profile_preflight(config, run, settings, write)
        if run.dry_run:
            extra.runtime_attestation = {"skipped": "dry_run"}
            return
        att = attest_runtime(client, expected_version=config.getoption("expect_runtime_version"),
                             repo_dir=repo, repo_head=head, repo_version=version,
                             allow_skew=skew_waived(config))
        extra.runtime_attestation = att.model_dump(mode="json", by_alias=True)
        write()
        require_runtime(att)


@pytest.fixture(scope="session")
def harness_agent(pytestconfig: pytest.Config) -> Agent:
    """The agent under test (one per process; agents keep no per-instance state)."""
    kind = agent_kind(pytestconfig) or "nop"
    options = agent_options(pytestconfig)
    tape = tape_config(pytestconfig)
    agent = build_agent(kind, options, tape)
    if tape is not None:
        tape.prepare()
        TAPES[agent] = tape
    return agent
