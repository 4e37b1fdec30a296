"""pytest wiring of agents: the controller's preflights of the agent under test (seed
gate, target actor, runtime attestation: recorded first, then enforced), the options that
change results, and the ``harness_agent`` fixture (the agent of the run's
:class:`~harness.runner.agent_choice.AgentChoice`, built once a process; one instance's run
of it: :mod:`harness.runner.agent_run`).

Under ``--model-record`` / ``--model-replay`` the fixture registers each agent's tape (a
``command`` or ``host-command`` agent behind the gateway, and ``mini-swe-agent``, whose
litellm calls then go through an in-process gateway), and
:func:`harness.runner.agent_run.run_agent` opens the instance's session. A replay needs no
``--model-upstream`` (refused with it) and no key: the command agents get a gateway with
neither.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness.agents.kinds import AGENT_KINDS
from harness.core.errors import RefusalError
from harness.runner.agent_choice import agent_choice, build_agent, tape_config
from harness.runner.agent_run import TAPES
from harness.runner.options import GATEWAY_URL_ENV

if TYPE_CHECKING:  # agents and rows load when a run starts, not at collection
    from harness.agents.base import Agent
    from harness.runner.instance import RunContext


def pytest_harness_result_config(config: pytest.Config) -> dict[str, Any]:
    """Agent options that change results (names only: never a secret value)."""
    allow = sorted(set(config.getoption("allow_model")))
    return {
        **({"agent.allow_models": allow} if allow else {}),  # absent: as before the option
        "agent.kind": agent_choice(config).kind,
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

    choice = agent_choice(config)
    kind = choice.kind
    if not kind and not any(a.needs_agent for a in run.adapters.values()):
        kind = "nop"
    if not kind:
        raise RefusalError(f"choose the agent under test with --agent "
                           f"{'|'.join(AGENT_KINDS)}", stage="agent", reason="agent_missing")
    options = choice.options
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
    repo = choice.repo
    head: str | None = None
    version: str | None = None
    if repo:
        from harness.agents.provenance import require_seed, seed_gate
        from harness.core.git import repo_provenance

        prov = repo_provenance(repo)
        gate = seed_gate(prov, allow_dirty_seed=choice.allow_dirty_seed,
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
    choice = agent_choice(pytestconfig)
    tape = tape_config(pytestconfig)
    agent = build_agent(choice.runs, choice.options, tape)
    if tape is not None:
        tape.prepare()
        TAPES[agent] = tape
    return agent
