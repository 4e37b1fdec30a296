"""``--agent mini-swe-agent``: the real ``mini-swe-agent`` package (``harness[mini]``,
pinned 2.4.6), its loop in this process, every command in the instance's sandbox.

Defaults are the pinned package's ``config/benchmarks/programbench.yaml`` (templates,
step limit 1000, cost limit 0, 6 h wall clock, 180 s per command, the environment's
variables); ``--agent-config FILE`` (YAML) is merged over them, ``--solve-model MODEL``
(litellm form) names the model. The package's Docker environment is replaced by
:class:`SandboxEnvironment`: ``bash -lc`` in ``/workspace`` as the agent user through
``sandbox.exec`` (no Docker socket, no ``docker`` CLI); the Docker-only keys of the
config (``run_args``, ``image``, ...) are recorded as ignored.

litellm is imported only when an agent runs (it takes seconds and tries the network at
import: ``LITELLM_LOCAL_MODEL_COST_MAP=True`` keeps it offline). Cost per call is
litellm's when it knows the model, else the ``--model-prices`` table; when neither prices
a call, the instance's cost is unknown (never $0). The row's ``models`` (source ``mini_swe``)
name the model each call reached, as the response gives it (litellm's resolved name), with
its calls, tokens and cost; ``steps`` is the loop's model calls. The trajectory
(``mini_swe_agent.traj.json``) is bounded: each observation's stored output is cut to
:data:`MAX_OUTPUT_CHARS`.

``--per-task-limit-usd`` is checked before every model call against the instance's spend
so far (the same accounting as the row's cost): once it is reached, or a call's cost is
unknown, no further call goes out and the instance is the agent's failure
``per_task_limit_reached`` (the work so far is scored).

Record and replay (``--model-record DIR`` / ``--model-replay DIR``,
:mod:`harness.model_proxy.tape`): litellm's calls then go through a model gateway in this
process (:class:`~harness.model_proxy.server.GatewayServer` on a loopback port; litellm's
``api_base`` points at it and its ``api_key`` is a per-instance token), which holds the
provider key, pins ``--solve-model`` (and ``--allow-model``) and records or replays every
call as it does for a command agent. Recording forwards to ``--model-upstream`` if given,
else to the config's ``model.model_kwargs.api_base`` (an OpenAI-compatible base URL), with
the key of ``$--model-key-env`` (default ``HARNESS_MODEL_API_KEY``), else the config's
``model.model_kwargs.api_key``. A replay needs neither. Only litellm model classes
(``litellm``, ``litellm_textbased``, ``litellm_response``) can be covered. A strict replay's
miss ends the loop at once (no retries): the agent's failure ``replay_miss``.

Exit statuses: ``Submitted`` completes; ``LimitsExceeded`` is the agent's failure
``step_limit_reached``, ``cost_limit_reached`` or ``per_task_limit_reached``; ``TimeExceeded`` is ``deadline_local``
(truncated); ``RepeatedFormatError`` is ``repeated_format_error``; a model API error
after the package's retries is infrastructure (``model_api_error``).
"""

from __future__ import annotations

import contextlib
import os
import platform
import secrets
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.agents.base import Agent, AgentOptions, AgentOutcome, AgentRequest, register_agent
from harness.core.errors import InfraError
from harness.core.fsutil import atomic_write_json
from harness.core.models import ModelCalls, Tokens
from harness.model_proxy.prices import ModelPrices, load_prices
from harness.model_proxy.tape import TapeSession, current_tape
from harness.sandbox.protocol import Sandbox

MINI_VERSION = "2.4.6"
TRAJ_NAME = "mini_swe_agent.traj.json"
RECORD_NAME = "mini_swe_agent.json"
MAX_OUTPUT_CHARS = 100_000  # per command, kept in the observation (head + tail)
SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
DOCKER_ONLY_KEYS = ("image", "run_args", "executable", "container_timeout", "pull_timeout",
                    "environment_class", "forward_env")
AGENT_USER = "agent"
SOURCE = "mini_swe"  # ModelCalls.source of this agent's records
DEFAULT_KEY_ENV = "HARNESS_MODEL_API_KEY"
LITELLM_CLASSES = ("", "litellm", "litellm_textbased", "litellm_response")


class ReplayMissed(Exception):
    """A strict replay had no record of a model call: the loop ends (never retried)."""


class MiniRunRecord(BaseModel):
    """``mini_swe_agent.json``: how the agent ran and what it cost."""

    model_config = ConfigDict(extra="forbid")

    schema_: str = Field(default="harness.agents.mini_swe_run.v1", alias="schema")
    mini_version: str
    model: str
    config_files: list[str]
    exit_status: str
    reason_code: str
    steps: int
    cost_usd: float | None
    cost_known: bool
    cost_source: str
    tokens: Tokens
    unpriced_calls: int
    models: list[ModelCalls] = Field(default_factory=list)
    ignored_environment_keys: list[str]
    wall_s: float
    error: str | None = None


def _yaml_load(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"--agent-config {path}: cannot read it as YAML ({exc})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"--agent-config {path}: top level must be a mapping")
    return data


def default_config_path() -> Path:
    """The pinned package's ProgramBench config (read without importing litellm)."""
    import importlib.util

    spec = importlib.util.find_spec("minisweagent")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("--agent mini-swe-agent needs the mini-swe-agent package: "
                         f"pip install 'harness[mini]' (mini-swe-agent=={MINI_VERSION})")
    return Path(next(iter(spec.submodule_search_locations))) / "config" / "benchmarks" / \
        "programbench.yaml"


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def load_config(config_file: str | None, model: str | None) -> tuple[dict[str, Any], list[str]]:
    """The merged config and the files it came from; ValueError names what to fix."""
    path = default_config_path()
    files = [str(path)]
    config = _yaml_load(path)
    if config_file:
        config = merge(config, _yaml_load(Path(config_file)))
        files.append(str(Path(config_file).absolute()))
    config.setdefault("model", {})
    if model:
        config["model"]["model_name"] = model
    if not config["model"].get("model_name"):
        raise ValueError("--agent mini-swe-agent needs the model: --solve-model MODEL "
                         "(litellm form, e.g. openrouter/anthropic/claude-sonnet-4.5)")
    for section in ("agent", "environment"):
        if not isinstance(config.get(section, {}), dict):
            raise ValueError(f"--agent-config: section {section!r} must be a mapping")
    return config, files


def _bounded(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters cut by harness ...]\n" \
           f"{text[-half:]}"


class SandboxEnvironmentConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")

    cwd: str = "/workspace"
    env: dict[str, str] = Field(default_factory=dict)
    timeout: int = 180
    interpreter: list[str] = Field(default_factory=lambda: ["bash", "-lc"])
    user: str = AGENT_USER


class SandboxEnvironment:
    """A mini-swe-agent environment: each action runs in the sandbox as the agent user,
    stdout and stderr merged, under the per-command timeout (the command's process tree is
    killed on expiry, the sandbox stays usable)."""

    def __init__(self, sandbox: Sandbox, **kwargs: Any) -> None:
        self.sandbox = sandbox
        self.config = SandboxEnvironmentConfig(**kwargs)
        self.container_id = sandbox.id

    def execute(self, action: dict[str, Any], cwd: str = "", *,
                timeout: int | None = None) -> dict[str, Any]:
        command = str(action.get("command", ""))
        limit = timeout or self.config.timeout
        argv = ["/bin/sh", "-c", 'exec "$@" 2>&1', "sh", *self.config.interpreter, command]
        try:
            result = self.sandbox.exec(argv, user=self.config.user, timeout=limit,
                                       workdir=cwd or self.config.cwd, env=self.config.env)
        except Exception as exc:  # the exec itself failed: the sandbox is gone or broken
            raise InfraError(f"mini-swe-agent: running a command in the sandbox failed: {exc}",
                             "sandbox_exec_failed") from exc
        text = result.stdout.decode("utf-8", "replace")
        if result.timed_out:
            output: dict[str, Any] = {
                "output": _bounded(text), "returncode": -1,
                "exception_info": f"An error occurred while executing the command: Command "
                                  f"timed out after {limit} seconds",
                "extra": {"exception_type": "TimeoutExpired"}}
        else:
            output = {"output": _bounded(text), "returncode": result.exit_code,
                      "exception_info": ""}
        self._check_finished(output)
        return output

    def _check_finished(self, output: dict[str, Any]) -> None:
        lines = output.get("output", "").lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT_MARKER and output["returncode"] == 0:
            from minisweagent.exceptions import Submitted

            submission = "".join(lines[1:])
            raise Submitted({"role": "exit", "content": submission,
                             "extra": {"exit_status": "Submitted", "submission": submission}})

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {**self.config.model_dump(), **platform.uname()._asdict(), **kwargs}

    def serialize(self) -> dict[str, Any]:
        return {"info": {"config": {
            "environment": self.config.model_dump(mode="json"),
            "environment_type": f"{type(self).__module__}.{type(self).__name__}",
            "sandbox": self.sandbox.name}}}


def _usage_of(message: Mapping[str, Any]) -> tuple[int, int, int]:
    response = (message.get("extra") or {}).get("response")
    usage = response.get("usage") if isinstance(response, Mapping) else None
    if not isinstance(usage, Mapping):
        return 0, 0, 0
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else 0
    return (int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0),
            int(cached or 0))


def _calls(messages: list[dict[str, Any]], model: str,
           prices: ModelPrices) -> Iterator[tuple[str, int, int, float | None]]:
    """Per model call of the trajectory: (the model litellm called, prompt tokens,
    completion tokens, cost or None). The model is the response's own ``model`` (what the
    provider answered as), else ``model``; the cost litellm's, else the price table's."""
    for msg in messages:
        extra = msg.get("extra") or {}
        if "response" not in extra:
            continue
        p, c, cached = _usage_of(msg)
        response = extra.get("response")
        named = response.get("model") if isinstance(response, Mapping) else None
        called = named.strip() if isinstance(named, str) and named.strip() else model
        reported = extra.get("cost")
        if isinstance(reported, (int, float)) and reported > 0:
            yield called, p, c, float(reported)
        else:
            yield called, p, c, prices.cost(p, c, model, cached=cached)


def account(messages: list[dict[str, Any]], model: str,
            prices: ModelPrices) -> tuple[Tokens, float | None, int, str]:
    """(tokens, cost or None, unpriced calls, source) over the trajectory's model calls."""
    prompt = completion = unpriced = 0
    total = 0.0
    for _, p, c, cost in _calls(messages, model, prices):
        prompt, completion = prompt + p, completion + c
        if cost is None:
            unpriced += 1
        else:
            total += cost
    tokens = Tokens(prompt=prompt, completion=completion, total=prompt + completion)
    if unpriced:
        return tokens, None, unpriced, "unknown"
    return tokens, total, 0, "agent_reported"


def models_called(messages: list[dict[str, Any]], model: str,
                  prices: ModelPrices) -> list[ModelCalls]:
    """The row's ``models`` (source ``mini_swe``): the calls per model litellm called, with
    tokens and cost (None once a call of that model could not be priced). Every call asked
    for ``--solve-model``, which the harness set itself: each is ``allowed``."""
    out: dict[str, ModelCalls] = {}
    for called, p, c, cost in _calls(messages, model, prices):
        entry = out.setdefault(called, ModelCalls(model=called, source=SOURCE, prompt_tokens=0,
                                                  completion_tokens=0, cost_usd=0.0))
        entry.calls += 1
        entry.prompt_tokens = (entry.prompt_tokens or 0) + p
        entry.completion_tokens = (entry.completion_tokens or 0) + c
        entry.cost_usd = None if cost is None or entry.cost_usd is None else \
            round(entry.cost_usd + cost, 12)
    return list(out.values())


class MiniSweAgent(Agent):
    kind = "mini-swe-agent"
    shell_only = True  # bash is its only tool
    tape_route = "in_process"  # it routes its own calls (see tape_problem)

    def __init__(self, config: dict[str, Any], files: list[str], prices: ModelPrices,
                 limit_usd: float | None = None, *, allow_models: list[str] | None = None,
                 model_upstream: str | None = None, model_key_env: str | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        self.config = config
        self.files = files
        self.prices = prices
        self.limit_usd = limit_usd
        self.allow_models = list(allow_models or [])
        self.model_upstream = model_upstream
        self.model_key_env = model_key_env
        self._environ = environ

    @classmethod
    def from_options(cls, options: AgentOptions) -> MiniSweAgent:
        config, files = load_config(options.agent_config, options.solve_model)
        return cls(config, files, load_prices(options.model_prices), options.per_task_limit_usd,
                   allow_models=options.allow_models, model_upstream=options.model_upstream,
                   model_key_env=options.model_key_env)

    @property
    def model_name(self) -> str:
        return str(self.config["model"]["model_name"])

    # -- record and replay -----------------------------------------------------------
    def _model_kwargs(self) -> dict[str, Any]:
        kwargs = (self.config.get("model") or {}).get("model_kwargs") or {}
        return dict(kwargs) if isinstance(kwargs, Mapping) else {}

    def record_upstream(self) -> tuple[str, str]:
        """Where a recording forwards and with which key: ``--model-upstream`` (else the
        config's ``api_base``) and ``$--model-key-env`` (else the config's ``api_key``).
        ValueError naming the fix when either is missing."""
        kwargs = self._model_kwargs()
        upstream = self.model_upstream or kwargs.get("api_base") or kwargs.get("base_url")
        if not isinstance(upstream, str) or not upstream.startswith(("http://", "https://")):
            raise ValueError("--model-record with mini-swe-agent: the in-process gateway "
                             "needs the provider's OpenAI-compatible base URL: --model-upstream "
                             "URL (or model.model_kwargs.api_base in --agent-config)")
        environ = os.environ if self._environ is None else self._environ
        key = environ.get(self.model_key_env or DEFAULT_KEY_ENV) or kwargs.get("api_key")
        if not isinstance(key, str) or not key:
            raise ValueError(f"--model-record with mini-swe-agent: the in-process gateway "
                             f"holds the provider key: export "
                             f"${self.model_key_env or DEFAULT_KEY_ENV} (or name the variable "
                             f"with --model-key-env, or set model.model_kwargs.api_key)")
        return upstream, key

    def tape_problem(self, mode: str) -> str | None:
        """Why this agent's model calls cannot be recorded or replayed (None: they can)."""
        model_class = str((self.config.get("model") or {}).get("model_class") or "")
        if model_class not in LITELLM_CLASSES:
            return (f"--model-{mode}: mini-swe-agent's model class {model_class!r} calls its "
                    f"provider itself, not through litellm; use one of "
                    f"{', '.join(c for c in LITELLM_CLASSES if c)}")
        if mode == "record":
            try:
                self.record_upstream()
            except ValueError as exc:
                return str(exc)
        return None

    def _tape_gateway(self, session: TapeSession, model_cfg: dict[str, Any],
                      stack: contextlib.ExitStack) -> None:
        """Start the in-process gateway of this instance's tape and point litellm at it."""
        from harness.model_proxy.pinning import pin_for
        from harness.model_proxy.server import GatewayServer
        from harness.model_proxy.usage import InstanceMeter

        upstream, key = ("", "") if session.replaying else self.record_upstream()
        pin = pin_for(self.model_name, self.allow_models)
        meter = InstanceMeter(self.prices, None, pinned=None if pin is None else pin.allowed)
        token = "harness-gw-" + secrets.token_hex(16)
        server = GatewayServer(upstream, key, meter, token=token, pin=pin, tape=session).start()
        stack.callback(server.close)
        assert server.base_url is not None
        kwargs = dict(model_cfg.get("model_kwargs") or {})
        kwargs.pop("base_url", None)
        provider = self.model_name.split("/", 1)[0].strip().lower()
        # litellm's Anthropic route adds /v1/messages to its base; the others add the path
        kwargs["api_base"] = server.base_url if provider == "anthropic" else \
            f"{server.base_url}/v1"
        kwargs["api_key"] = token
        model_cfg["model_kwargs"] = kwargs

    @staticmethod
    def _stop_on_miss(model: Any, session: TapeSession) -> None:
        """A strict replay's miss ends the loop at once instead of the package's retries."""
        from minisweagent.models.litellm_model import LitellmModel

        if not isinstance(model, LitellmModel):
            raise InfraError(f"--model-{session.config.mode}: mini-swe-agent's model "
                             f"{type(model).__name__} does not call through litellm",
                             "agent_setup_failed")
        if not session.replaying:
            return
        query = model._query

        def _query(messages: list[dict[str, str]], **kwargs: Any) -> Any:
            try:
                return query(messages, **kwargs)
            except Exception as exc:
                if session.missed:
                    raise ReplayMissed(str(exc)[:500]) from exc
                raise

        model._query = _query  # type: ignore[method-assign]
        model.abort_exceptions = [*model.abort_exceptions, ReplayMissed]

    def run(self, request: AgentRequest) -> AgentOutcome:
        if request.sandbox is None:
            raise InfraError("mini-swe-agent needs a sandbox, none was given", "agent_no_sandbox")
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")

        out_dir = Path(request.instance_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        traj = out_dir / TRAJ_NAME
        model_cfg = dict(self.config.get("model") or {})
        model_cfg.setdefault("cost_tracking", "ignore_errors")  # unknown stays unknown: below
        env_cfg = dict(self.config.get("environment") or {})
        ignored = sorted(k for k in env_cfg if k in DOCKER_ONLY_KEYS)
        env = SandboxEnvironment(request.sandbox,
                                 **{k: v for k, v in env_cfg.items() if k not in ignored})
        agent_cfg = dict(self.config.get("agent") or {})
        if request.timeout_sec:
            limit = int(agent_cfg.get("wall_time_limit_seconds") or 0)
            agent_cfg["wall_time_limit_seconds"] = int(request.timeout_sec) if limit <= 0 \
                else min(limit, int(request.timeout_sec))
        agent_cfg["output_path"] = traj
        with contextlib.ExitStack() as stack:
            session = current_tape()
            if session is not None:
                self._tape_gateway(session, model_cfg, stack)
            return self._run(request, out_dir, traj, model_cfg, env, agent_cfg, ignored,
                             session)

    def _run(self, request: AgentRequest, out_dir: Path, traj: Path, model_cfg: dict[str, Any],
             env: SandboxEnvironment, agent_cfg: dict[str, Any], ignored: list[str],
             session: TapeSession | None) -> AgentOutcome:
        from minisweagent import __version__
        from minisweagent.agents.default import DefaultAgent
        from minisweagent.models import get_model

        limit_usd, model_name, prices = self.limit_usd, self.model_name, self.prices
        limit_hit: list[str] = []  # why the per-task limit stopped the loop

        class _Agent(DefaultAgent):  # type: ignore[misc]
            def query(self) -> dict[str, Any]:
                """Before each model call: the instance's spend so far (this module's
                accounting, the row's) must be known and under ``--per-task-limit-usd``."""
                if limit_usd is not None:
                    _, spent, unpriced, _ = account(self.messages, model_name, prices)
                    if unpriced or spent is None or spent >= limit_usd:
                        from minisweagent.exceptions import LimitsExceeded

                        limit_hit.append("cost_unknown" if spent is None else
                                         f"spent ${spent:.6f} of ${limit_usd:g}")
                        raise LimitsExceeded({"role": "exit", "content": "LimitsExceeded",
                                              "extra": {"exit_status": "LimitsExceeded",
                                                        "submission": "",
                                                        "per_task_limit": limit_hit[-1]}})
                message: dict[str, Any] = super().query()
                return message

            def serialize(self, *extra_dicts: dict[str, Any]) -> dict[str, Any]:
                data: dict[str, Any] = super().serialize(*extra_dicts)
                for msg in data.get("messages", []):
                    (msg.get("extra") or {}).pop("raw_output", None)
                return data

        started = time.monotonic()
        error: str | None = None
        infra: str | None = None
        try:
            model = get_model(config=model_cfg)
            if session is not None:
                self._stop_on_miss(model, session)
            env.execute({"command": 'git config user.name "mini-swe-agent" && '
                                    'git config user.email "mini-swe-agent@proton.me"'})
            agent = _Agent(model, env, **agent_cfg)
        except InfraError:
            raise
        except Exception as exc:
            raise InfraError(f"mini-swe-agent could not start: {exc}", "agent_setup_failed") \
                from exc
        try:
            info = agent.run(task=request.instruction)
            status = str(info.get("exit_status") or "")
        except InfraError as exc:
            status, error, infra = "InfraError", str(exc), exc.reason_code
        except Exception as exc:  # the package re-raises after recording it
            status, error = type(exc).__name__, f"{type(exc).__name__}: {exc}"[:2000]
            infra = "model_api_error" if _is_model_error(exc) else None
        wall = time.monotonic() - started
        return self._outcome(agent, _Ended(status, error, infra, wall, limit_hit), out_dir,
                             traj, ignored, __version__)

    def _outcome(self, agent: Any, ended: _Ended, out_dir: Path, traj: Path,
                 ignored: list[str], mini_version: str) -> AgentOutcome:
        """The run's record (``agent_record``) and outcome, from the ``agent`` that ran and
        how its loop ended."""
        status, error, infra, wall = ended.status, ended.error, ended.infra, ended.wall
        limit_usd, limit_hit = self.limit_usd, ended.limit_hit
        tokens, cost, unpriced, source = account(agent.messages, self.model_name, self.prices)
        models = models_called(agent.messages, self.model_name, self.prices)
        step_limit = int(agent.config.step_limit or 0)
        reason = _reason(status, agent.n_calls, step_limit, infra)
        if limit_hit and status == "LimitsExceeded":
            reason = "per_task_limit_reached"
        record = MiniRunRecord(
            mini_version=mini_version, model=self.model_name, config_files=self.files,
            exit_status=status, reason_code=reason, steps=agent.n_calls, cost_usd=cost,
            cost_known=cost is not None, cost_source=source, tokens=tokens,
            unpriced_calls=unpriced, models=models, ignored_environment_keys=ignored,
            wall_s=round(wall, 3),
            error=error)
        record_path = out_dir / RECORD_NAME
        atomic_write_json(record_path, record)
        paths = {"agent_record": str(record_path)}
        if traj.is_file():
            paths["trajectory"] = str(traj)
        return AgentOutcome(
            agent=self.kind, completed=status == "Submitted", infra=infra is not None,
            reason_code=reason, truncated=status == "TimeExceeded", cost_usd=cost,
            cost_known=cost is not None, tokens=tokens, duration_s=round(wall, 3),
            models=models, steps=agent.n_calls, output_paths=paths,
            details={"steps": agent.n_calls, "exit_status": status, "cost_source": source,
                     "model": self.model_name, **({"error": error} if error else {}),
                     **({"per_task_limit_usd": limit_usd,
                         "per_task_limit_reached": limit_hit[-1]}
                        if limit_hit else {})})


@dataclass(frozen=True)
class _Ended:
    """How mini-swe-agent's loop ended: its exit status, error and infrastructure reason
    (None: not infra), wall time, and why the per-task limit stopped it (if it did)."""

    status: str
    error: str | None
    infra: str | None
    wall: float
    limit_hit: list[str]


def _is_model_error(exc: BaseException) -> bool:
    module = type(exc).__module__ or ""
    return module.startswith(("litellm", "openai", "httpx"))


def _reason(status: str, steps: int, step_limit: int, infra: str | None) -> str:
    if infra:
        return infra
    if status == "Submitted":
        return "completed"
    if status == "LimitsExceeded":
        return "step_limit_reached" if 0 < step_limit <= steps else "cost_limit_reached"
    if status == "TimeExceeded":
        return "deadline_local"
    if status == "RepeatedFormatError":
        return "repeated_format_error"
    return "agent_error"


@register_agent("mini-swe-agent", MiniSweAgent)
def _make(options: AgentOptions) -> Agent:
    return MiniSweAgent.from_options(options)
