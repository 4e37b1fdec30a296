"""pytest plugin: a run whose engines cannot work is refused at admission, in one line
(exit 2), before any instance starts.

* ``bad_engines``: ``--docker-host``/``--engines``/``--instance-resources`` do not parse.
* ``gateway_remote_engine``: ``--agent gateway`` with an ``ssh://`` or ``tcp://`` engine of
  ``--docker-host``/``--engines``. The agent server works in the sandbox with ``docker
  exec`` on its own engine (the task body's ``executor_ref``), so it cannot reach a
  sandbox the runner placed on an engine of another machine. (A ``DOCKER_HOST`` of the
  environment is not refused: the server may well share it.)
* ``relay_remote_engine``: an agent or benchmark that starts a relay container
  bind-mounting a socket of this machine (its class's ``relays``: the model
  gateway's relay of ``--agent command`` behind ``--model-upstream``/``--model-replay``;
  the tool route of ``--agent gateway`` to a benchmark's tools) with an ``ssh://`` or
  ``tcp://`` engine, from the options or, without them, ``DOCKER_HOST``: a remote engine
  would mount a path of its own machine.
* ``engine_unreachable``: without ``--docker-host``/``--engines`` the run uses the local
  engine (``DOCKER_HOST`` or the default socket); it is asked for its version once (10 s
  at most) and a run it does not answer is refused, naming the engine, the error in a few
  words and the fix. Not in a dry run, a resume that runs nothing, or a run whose
  benchmarks need no engine (:meth:`BenchmarkAdapter.needs_engine`). With
  ``--docker-host``/``--engines``, :mod:`harness.runner.engine_plugin` probes each engine:
  one that does not answer is recorded and never used, none answering is ``no_engine``.

The option checks are the first admission step (:mod:`harness.runner.admission_pipeline`:
no engine, agent server or campaign is contacted before them); the local probe runs where
the engines are probed (:mod:`harness.runner.engine_plugin`), after the options of the
agent and the budget were checked and before the runner's own Docker calls (the image
pins, the lease and the start-up sweep, each instance's sandbox client, whose failure was
a chained docker-py traceback of some 600 lines per instance and try). A benchmark's own admission may ask
the engine earlier and record what it could not read (Cowork's run images).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pytest

from harness.core.errors import RefusalError
from harness.runner.agent_choice import agent_choice

if TYPE_CHECKING:
    from harness.runner.instance import RunContext
    from harness.sandbox.engine_capacity import InstanceNeeds
    from harness.sandbox.engines import EngineSpec

REMOTE_SCHEMES = ("ssh://", "tcp://")  # engines that may run on another machine
DEFAULT_SOCKET = "unix:///var/run/docker.sock"  # docker-py's, without DOCKER_HOST
OPTIONS = "--docker-host/--engines"
ENGINES_KEY: pytest.StashKey[tuple[list[EngineSpec], InstanceNeeds | None]] = pytest.StashKey()


def remote(urls: Sequence[str]) -> list[str]:
    """The engines of ``urls`` that may be on another machine."""
    return [u for u in urls if u.startswith(REMOTE_SCHEMES)]


def local_engine() -> tuple[str, str]:
    """The local engine's URL and where it comes from (``DOCKER_HOST`` or the default)."""
    given = os.environ.get("DOCKER_HOST", "").strip()
    return (given, "DOCKER_HOST") if given else (DEFAULT_SOCKET, "the default socket")


def run_engines(config: pytest.Config) -> tuple[list[EngineSpec], InstanceNeeds | None]:
    """The engines of ``--docker-host``/``--engines`` and one instance's size, read once per
    run ([] and None: the local engine only); a bad value is ``bad_engines``."""
    if ENGINES_KEY in config.stash:
        return config.stash[ENGINES_KEY]
    hosts = list(config.getoption("docker_host", None) or [])
    engines_file = config.getoption("engines", None)
    resources = config.getoption("instance_resources", None)
    found: tuple[list[EngineSpec], InstanceNeeds | None] = ([], None)
    if hosts or engines_file or resources:
        from harness.sandbox.engines import EngineError, engine_specs, instance_needs

        workers = int(getattr(config.option, "numprocesses", 0) or 0) or 1
        try:
            found = (engine_specs(hosts, engines_file, workers),
                     instance_needs(engines_file, resources))
        except EngineError as exc:
            raise RefusalError(str(exc), stage="engines", reason="bad_engines") from exc
    config.stash[ENGINES_KEY] = found
    return found


def gateway_refusal(kind: str | None, urls: Sequence[str]) -> str | None:
    """Why ``--agent gateway`` (an agent server that execs into the sandbox on its own
    engine) cannot run on these engines of the options, in one line naming the fix; None
    when it can."""
    far = remote(urls)
    if not kind or not far:
        return None
    from harness.agents.base import agent_class  # the agent classes load when a run starts

    try:
        if not agent_class(kind).remote_server:  # an agent server of its own
            return None
    except ValueError:
        return None  # an unknown kind: the agent plugin refuses it, naming the kinds
    return (
        f"--agent {kind} with the remote engine {', '.join(far)} of {OPTIONS}: the agent "
        "server runs `docker exec` on its own engine and cannot reach a sandbox there; run "
        "the server on the engine's machine and point the runner at that engine locally "
        "(unix://), or use an agent that runs on the runner (--agent command, host-command "
        "or mini-swe-agent)"
    )


def relay_refusal(
    kind: str | None, upstream: str | None, replay: str | None, urls: Sequence[str], *,
    tool_routes: Sequence[str] = (), given_by: str = OPTIONS,
) -> str | None:
    """Why the run cannot start, in one line naming the fix, or None: its agent (or a
    benchmark for it) starts a relay container that bind-mounts a socket of this machine
    (its class's ``relays``), so its sandboxes must run on an engine of this
    machine (docs/scaling.md, "Not yet over remote engines"). ``tool_routes``: the run's
    benchmarks whose tools reach an agent server through a relay; ``given_by``: where
    ``urls`` come from (the options, or ``DOCKER_HOST``)."""
    from harness.agents.base import agent_class  # the agent classes load when a run starts

    far = remote(urls)
    try:
        relays = agent_class(kind).relays if kind else ()
    except ValueError:
        relays = ()  # an unknown kind: the agent step refuses it, naming the kinds
    what = None
    if "model_gateway" in relays and (upstream or replay):
        flag = "--model-upstream" if upstream else "--model-replay"
        what = f"{flag} with --agent {kind}: the model gateway's relay"
    elif "tool_route" in relays and tool_routes:
        what = f"--agent {kind} with {', '.join(tool_routes)}: the tool route's relay"
    if what is None or not far:
        return None
    fix = (f"drop the ssh:// and tcp:// ones from {OPTIONS}" if given_by == OPTIONS
           else f"point {given_by} at a unix:// socket, or unset it")
    return (
        f"{what} mounts a socket of this machine and cannot reach a sandbox on the remote "
        f"engine {', '.join(far)} ({given_by}); run it on local or unix:// engines only "
        f"({fix})"
    )


def check_engine_options(config: pytest.Config, run: RunContext) -> None:
    """The checks of the options alone, before any other admission step."""
    specs, _ = run_engines(config)
    urls = [s.url for s in specs]
    choice = agent_choice(config)
    kind = choice.given
    why = gateway_refusal(kind, urls)
    if why is not None:
        raise RefusalError(why, stage="engines", reason="gateway_remote_engine")
    given_by = OPTIONS
    if not urls:  # the local engine: remote when DOCKER_HOST names another machine
        urls, given_by = [local_engine()[0]], "DOCKER_HOST"
    why = relay_refusal(
        kind, choice.model_upstream, choice.model_replay,
        urls, tool_routes=sorted(n for n, a in run.adapters.items() if a.tool_routes),
        given_by=given_by,
    )
    if why is not None:
        raise RefusalError(why, stage="engines", reason="relay_remote_engine")


def _needs_engine(config: pytest.Config, run: RunContext) -> bool:
    if run.dry_run or run.plan.runs_nothing:
        return False
    for adapter in run.adapters.values():
        try:
            if adapter.needs_engine(config):
                return True
        except Exception:  # a benchmark that cannot tell: it is asked what it needs
            return True
    return False


def check_local_engine(config: pytest.Config, run: RunContext) -> None:
    """The local engine answers a version call (10 s at most), or the run is refused
    (``engine_unreachable``); a run that needs no engine asks nothing."""
    if not _needs_engine(config, run):
        return
    from harness.sandbox.engines import LOCAL, EngineSpec, brief_error, probe

    try:
        record = probe(EngineSpec(url=LOCAL), 0)
        error = None if record.reachable else record.error
    except Exception as exc:  # e.g. an ssh:// DOCKER_HOST without its client library
        error = f"{type(exc).__name__}: {exc}"
    if error is None:
        return
    url, named = local_engine()
    raise RefusalError(
        f"the Docker engine {url} ({named}) does not answer: {brief_error(error)}; start "
        "Docker (e.g. `sudo systemctl start docker`), or point DOCKER_HOST or --docker-host "
        "at a running engine",
        stage="engines", reason="engine_unreachable",
    )
