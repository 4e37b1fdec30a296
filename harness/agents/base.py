"""The interface the runner uses for every agent kind.

``Agent.run(request) -> AgentOutcome``: the request carries what one instance gives the
agent (instruction, sandbox, the task's terms, its oracle); the outcome is
what the ledger row needs. An agent *returns* an outcome for anything it ran (an infra
result included, ``infra=True``) and *raises* :class:`harness.core.errors.InfraError` when it
could not run at all. :class:`OracleUnavailable` asks the runner for a skipped row.

Around ``run`` the runner calls :meth:`Agent.before_run` (it may return a changed request)
and :meth:`Agent.after_run` (also when ``run`` raised or was interrupted: ``outcome`` None),
both with an :class:`InstanceView` of the instance; they do nothing unless a kind needs them
(the gateway agent carries checkpoints and records paid evidence there). A new kind is one
module that registers a factory (:func:`register_agent`) plus its entry in
:data:`harness.agents.kinds.AGENT_MODULES`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.agents.kinds import AGENT_KINDS as AGENT_KINDS
from harness.agents.kinds import AGENT_MODULES as AGENT_MODULES
from harness.core.models import ModelCalls, Tokens

if TYPE_CHECKING:
    from harness.sandbox import container
    from harness.sandbox.protocol import Sandbox
    from harness.sandbox.reattach import SandboxRecord

COST_SOURCES = ("gateway", "agent_reported", "meter", "unknown")

# How a kind's model calls pass through the harness, so ``--model-record`` and
# ``--model-replay`` can tape them (:attr:`Agent.tape_route`): "model_gateway", through the
# model gateway the harness runs for it (``--model-upstream``; a replay gives it a gateway
# with no upstream and no key: its factory takes ``environ``); "in_process", the kind routes
# its own calls and says what it cannot tape (:meth:`Agent.tape_problem`).
TapeRoute = Literal["model_gateway", "in_process"]
# A relay container the runner starts beside a kind's sandbox (:attr:`Agent.relays`), each
# bind-mounting a socket of this machine, so none works on an engine of another machine (an
# ``ssh://`` or ``tcp://`` one): "model_gateway", behind the model gateway
# (``--model-upstream`` or ``--model-replay``: :mod:`harness.model_proxy.network`);
# "tool_route", an agent server's route to the tools a benchmark serves on the task's
# network (a benchmark with ``tool_routes``: :mod:`harness.agents.gateway.tool_route`).
Relay = Literal["model_gateway", "tool_route"]


class OraclePlan(BaseModel):
    """A reference solution given as shell commands, run in the sandbox in order."""

    model_config = ConfigDict(extra="forbid")

    commands: list[str] = Field(min_length=1)
    user: str | None = None
    timeout_sec: float | None = None
    # Host folders (the benchmark's own, trusted) copied into the sandbox before the
    # commands: (host folder, container folder), e.g. a task's solution/ to /solution.
    folders: list[tuple[str, str]] = Field(default_factory=list)


OracleCallable = Callable[["AgentRequest"], "AgentOutcome | None"]


@dataclass(frozen=True)
class ProtectedPath:
    """A file of the task the agent may run and nothing more (a judge's reference program):
    never read, copy, hash, trace or debug it. ``paths``: where it is (absolute, in the
    sandbox; or relative to the workspace)."""

    id: str
    role: str
    paths: tuple[str, ...]
    allow: tuple[str, ...] = ("execute",)
    deny: tuple[str, ...] = ("read_bytes", "copy", "hash", "static_introspection",
                             "dynamic_trace", "debug")


@dataclass(frozen=True)
class Acceptance:
    """What the finished work must meet, in words the agent may read (never the tests)."""

    id: str
    claim: str
    surface: str
    support: str
    priority: str = "must"


@dataclass(frozen=True)
class AgentTerms:
    """The task's terms for the agent, whatever its kind: what the task says of itself
    (``metadata``: never its tests or solution), the tools the agent must not use, the files
    it may only run, what the finished work must meet, who asks (default: the benchmark),
    where the agent works and whether it has a network (default: as its sandbox is), and the
    time its own work may take (default: the request's timeout). An agent with tools and a
    clock of its own (an agent server) is given them all; another honours what it can."""

    metadata: Mapping[str, Any] = field(default_factory=dict)
    tools_off: tuple[str, ...] = ()
    protected: tuple[ProtectedPath, ...] = ()
    acceptance: tuple[Acceptance, ...] = ()
    source: str | None = None
    workspace: str | None = None
    offline: bool | None = None
    work_timeout_sec: float | None = None
    # what a dry run shows, with no sandbox made: the host folder the sandbox would have
    # mounted on its workspace (a sandbox's own mount is what counts when there is one)
    host_workspace: str | None = None


@dataclass(frozen=True)
class AgentRequest:
    """Everything one instance hands to its agent: a neutral task, whatever the kind (an
    agent server's task is built from it by that agent: :mod:`harness.agents.gateway.body`)."""

    instance_id: str
    instance_dir: Path
    instruction: str
    # an agent server's task given whole, instead of built from this request (a test, or a
    # tool driving one agent; never a benchmark)
    task_body: Mapping[str, Any] | BaseModel | None = None
    sandbox: Sandbox | None = None
    timeout_sec: float | None = None
    env_allowlist: Sequence[str] = ()
    oracle: OracleCallable | OraclePlan | None = None
    adapter: str = "harness"
    extra: Mapping[str, Any] = field(default_factory=dict)
    terms: AgentTerms = field(default_factory=AgentTerms)


class RuntimeOutcome(BaseModel):
    """The agent runtime's own verdict (the ledger's ``runtime_outcome``)."""

    model_config = ConfigDict(extra="allow")

    available: bool = False
    status: str | None = None
    reason_code: str | None = None
    truncated: bool | None = None
    degraded: bool | None = None
    degraded_reason: str | None = None
    execution_status: str | None = None
    execution_reason_code: str | None = None
    resource_limit: str | None = None


class AgentOutcome(BaseModel):
    """What an agent run produced, in the terms of a ledger row."""

    model_config = ConfigDict(extra="forbid")

    agent: str
    completed: bool
    infra: bool = False
    reason_code: str | None = None
    truncated: bool = False
    cost_usd: float | None = None
    cost_known: bool = False
    # What the budget settles besides this run's own cost: the run continued the task of an
    # earlier attempt (``reattached``: its cost covers that attempt's), and what the tasks
    # earlier attempts left running reported once settled (``earlier_cost_usd``; None: no
    # such task reported a cost).
    reattached: bool = False
    earlier_cost_usd: float | None = None
    tokens: Tokens = Field(default_factory=Tokens)
    # The models called, per model and source (None: the harness does not see the calls);
    # ``steps``: the agent's own count of its steps (model calls), where it keeps one.
    models: list[ModelCalls] | None = None
    steps: int | None = None
    runtime_outcome: RuntimeOutcome = Field(default_factory=RuntimeOutcome)
    task_id: str | None = None
    raw_result_path: str | None = None
    exit_code: int | None = None
    duration_s: float | None = None
    output_paths: dict[str, str] = Field(default_factory=dict)
    details: dict[str, Any] = Field(default_factory=dict)
    # The agent ended its own sandbox (e.g. its PID 1 died): an agent failure with nothing
    # left to collect, so the runner records it at once instead of collecting output.
    sandbox_lost: bool = False


class OracleUnavailable(Exception):
    """The adapter has no reference solution for this instance: the row is skipped."""

    def __init__(self, message: str, reason: str = "oracle_unavailable") -> None:
        super().__init__(message)
        self.reason = reason


def _no_output(name: str, path: Path) -> None:
    return None


@dataclass(frozen=True)
class InstanceView:
    """What an agent's hooks see of the instance (the runner builds it; no runner types).

    ``details`` is the row's ``details`` itself: what a hook writes there lands in the row.
    ``output(name, path)`` records a file as one of the row's outputs.
    """

    benchmark: str
    instance_id: str
    instance_dir: Path
    run_root: Path
    ancestors: tuple[Path, ...] = ()  # run roots of the earlier attempts, nearest first
    details: dict[str, Any] = field(default_factory=dict)
    output: Callable[[str, Path], object] = _no_output


class SandboxKeeper(Protocol):
    """What a reattach needs of the instance's sandbox factory: take a kept sandbox over,
    and keep one running past the instance."""

    def adopt(self, record: SandboxRecord) -> container.Sandbox: ...

    def keep(self, sandbox: container.Sandbox) -> None: ...


class Agent:
    """The base of every agent kind: :meth:`run`, hooks that do nothing here, and the
    capabilities the runner asks about (it never asks for a kind by name)."""

    kind: str = ""
    # True for an agent that only applies the benchmark's reference solution (the oracle):
    # an instance with none is skipped before anything is provisioned for it (no image pull).
    needs_reference_solution: bool = False
    # True for an agent that drives a task on an agent server (``--gateway-url``): the run
    # needs the server's URL, checks the server before any task (target actor, runtime
    # attestation), and a dry run without a URL only writes the task bodies it would get.
    remote_server: bool = False
    # True for an agent whose task may outlive its run in the sandbox it works in: the trial
    # asks its sandbox hooks (:meth:`sandbox_labels`, :meth:`adopt_sandbox`,
    # :meth:`keep_sandbox`) to keep that sandbox and to take it over on a resume.
    reattaches: bool = False
    # How its model calls pass through the harness (:data:`TapeRoute`); None: it calls its
    # model outside the harness, and ``--model-record``/``--model-replay`` are refused.
    tape_route: TapeRoute | None = None
    # The relays it starts beside its sandbox (:data:`Relay`): none for a kind that keeps its
    # model gateway on a loopback port of the runner and drives the sandbox through the
    # engine's API (host-command, mini-swe-agent, oracle, nop), which reaches a remote
    # engine too.
    relays: tuple[Relay, ...] = ()
    # True for an agent whose only tool is a shell in the sandbox: tools a benchmark serves
    # reach it as a command its instruction names (Cowork's ``mcp-call``).
    shell_only: bool = False
    # True for an agent whose own code runs inside the sandbox, copied in from the run's
    # ``--agent-repo`` checkout (a benchmark that makes the sandbox seeds it there).
    runs_in_sandbox: bool = False

    def run(self, request: AgentRequest) -> AgentOutcome:
        raise NotImplementedError(f"agent kind {self.kind!r} does not implement run()")

    @classmethod
    def capabilities(cls) -> AgentCapabilities:
        """What a benchmark may ask of this kind (never the agent itself)."""
        return AgentCapabilities(
            kind=cls.kind, needs_reference_solution=cls.needs_reference_solution,
            remote_server=cls.remote_server, reattaches=cls.reattaches,
            tape_route=cls.tape_route, relays=tuple(cls.relays), shell_only=cls.shell_only,
            runs_in_sandbox=cls.runs_in_sandbox)

    def missing_env(self) -> list[str]:
        """Names the agent is to get from the runner's environment that are not set there
        (checked before the run starts; default: none)."""
        return []

    @classmethod
    def task_preview(cls, request: AgentRequest) -> BaseModel | None:
        """What an agent of this kind would submit for ``request`` (an agent server's task),
        for a dry run to write (asked of the class: a dry run builds no agent); None
        (default): nothing beyond the request."""
        return None

    def tape_problem(self, mode: str) -> str | None:
        """Why this agent's model calls cannot be recorded or replayed under
        ``--model-<mode>`` (one line naming the fix), None when they can (default)."""
        return None

    def before_run(self, view: InstanceView, request: AgentRequest) -> AgentRequest:
        """Called before :meth:`run`; the request ``run`` gets (default: unchanged)."""
        return request

    def after_run(self, view: InstanceView, request: AgentRequest,
                  outcome: AgentOutcome | None) -> None:
        """Called after :meth:`run`, also when it raised or was interrupted (``outcome``
        None); ``request`` is the one ``run`` got."""
        return None

    def sandbox_labels(self) -> dict[str, str]:
        """Labels of a sandbox this agent's task works in (a reattaching agent's mark it
        kept for a resume; default: none)."""
        return {}

    def adopt_sandbox(self, view: InstanceView, keeper: SandboxKeeper
                      ) -> tuple[container.Sandbox, dict[str, Any]] | None:
        """On a resume, an ancestor's kept sandbox taken over and the request ``extra`` that
        reattaches to its task; None (default): a fresh sandbox."""
        return None

    def keep_sandbox(self, view: InstanceView, keeper: SandboxKeeper,
                     sandbox: container.Sandbox) -> bool:
        """After the agent's infrastructure failure: keep ``sandbox`` running for a resume
        when its task still runs there; True when kept (default: never)."""
        return False


class NopAgent(Agent):
    """Does nothing; the outcome is ``completed`` (a pipeline check, or a scorer baseline)."""

    kind = "nop"

    def run(self, request: AgentRequest) -> AgentOutcome:
        return AgentOutcome(
            agent=self.kind,
            completed=True,
            reason_code="nop",
            cost_usd=0.0,
            cost_known=True,
            duration_s=0.0,
        )


class AgentOptions(BaseModel):
    """Options of every agent kind (each kind reads its own; unset means default)."""

    model_config = ConfigDict(extra="forbid")

    # command
    command: str | list[str] | None = None
    env: list[str] = Field(default_factory=list)
    instruction_via: str = "both"
    user: str | None = None
    workdir: str | None = None
    kill_after_s: float | None = None
    exec_margin_s: float | None = None
    # gateway
    gateway_url: str | None = None
    poll_interval_s: float | None = None
    client_grace_s: float | None = None
    adapter: str | None = None
    # the model under test (mini-swe-agent's model; the pin of the model gateway; what the
    # gateway's usage events are checked against) and its helpers (--allow-model)
    solve_model: str | None = None
    allow_models: list[str] = Field(default_factory=list)
    # mini-swe-agent
    agent_config: str | None = None
    # model gateway (command agents) and prices (gateway, mini-swe-agent)
    model_upstream: str | None = None
    model_key_env: str | None = None
    model_prices: str | None = None
    per_task_limit_usd: float | None = None


AgentFactory = Callable[..., "Agent"]
_FACTORIES: dict[str, AgentFactory] = {}
_CLASSES: dict[str, type[Agent]] = {}


def register_agent(kind: str, agent_class: type[Agent] = Agent
                   ) -> Callable[[AgentFactory], AgentFactory]:
    """Decorator: ``factory(options) -> Agent`` builds agents of ``kind``, instances of
    ``agent_class`` (whose capabilities the runner asks about before building one: see
    :func:`agent_class`); a kind taped at the model gateway (``tape_route``
    "model_gateway") also takes ``environ=`` (the environment its gateway reads instead of
    the runner's)."""

    def register(factory: AgentFactory) -> AgentFactory:
        _FACTORIES[kind] = factory
        _CLASSES[kind] = agent_class
        return factory

    return register


def agent_class(kind: str) -> type[Agent]:
    """The class of ``kind``'s agents (its capabilities, read before any agent is built);
    a one-line :class:`ValueError` for an unknown kind."""
    if kind not in AGENT_MODULES:
        raise ValueError(f"unknown agent kind {kind!r}: use one of {', '.join(AGENT_MODULES)}")
    if kind not in _CLASSES:
        importlib.import_module(AGENT_MODULES[kind])
    return _CLASSES.get(kind, Agent)


@dataclass(frozen=True)
class AgentCapabilities:
    """What the runner and a benchmark may ask of an agent kind (its class's attributes:
    see :class:`Agent`), without building an agent."""

    kind: str
    needs_reference_solution: bool
    remote_server: bool
    reattaches: bool
    tape_route: TapeRoute | None
    relays: tuple[Relay, ...]
    shell_only: bool = False
    runs_in_sandbox: bool = False


def agent_capabilities(kind: str) -> AgentCapabilities:
    """The capabilities of ``kind``; a one-line :class:`ValueError` for an unknown kind."""
    return agent_class(kind).capabilities()


def tape_kinds() -> list[str]:
    """The kinds whose model calls can be taped (``tape_route`` set), in kind order."""
    return [kind for kind in AGENT_KINDS if agent_class(kind).tape_route is not None]


def make_agent(kind: str, options: AgentOptions | Mapping[str, Any] | None = None,
               environ: Mapping[str, str] | None = None) -> Agent:
    """The agent of ``kind`` (one of :data:`AGENT_KINDS`), from the registry; ``environ``,
    when given, is the environment the agent reads instead of the runner's (only a kind
    whose factory takes it: see :func:`register_agent`).

    Every error is a one-line :class:`ValueError` naming the option to fix.
    """
    if kind not in AGENT_MODULES:
        raise ValueError(f"unknown agent kind {kind!r}: use one of {', '.join(AGENT_MODULES)}")
    try:
        opts = (
            options
            if isinstance(options, AgentOptions)
            else AgentOptions.model_validate(dict(options or {}))
        )
        if kind not in _FACTORIES:
            importlib.import_module(AGENT_MODULES[kind])
        factory = _FACTORIES.get(kind)
        if factory is None:
            raise ValueError(f"agent kind {kind!r}: {AGENT_MODULES[kind]} registers no factory")
        return factory(opts) if environ is None else factory(opts, environ=environ)
    except ValidationError as exc:
        from harness.agents.gateway.models import describe_validation_error  # off collection

        raise ValueError(f"--agent {kind}: {describe_validation_error(exc, limit=3)}") from None


@register_agent("nop", NopAgent)
def _nop(options: AgentOptions) -> Agent:
    return NopAgent()
