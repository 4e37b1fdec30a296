"""``--agent command``: the registry's entry for the command agent
(:class:`~harness.agents.command.CommandAgent`), and with ``--model-upstream URL`` the
command agent behind a model gateway (:class:`GatewayCommandAgent`).

Per instance: a :class:`~harness.model_proxy.server.GatewayServer` (key and meter, in
this process), its relay network (:mod:`harness.model_proxy.network`), then the usual
command agent with ``OPENAI_BASE_URL``/``OPENAI_API_BASE`` = ``http://model-gateway:8080/v1``,
``ANTHROPIC_BASE_URL`` = ``http://model-gateway:8080`` and placeholder API keys (the
SDKs insist on one; the gateway replaces it). The provider key is read from
``$<--model-key-env>`` (default ``HARNESS_MODEL_API_KEY``) and never leaves this process.

The model under test is pinned (:mod:`harness.model_proxy.pinning`): the gateway forwards
only ``--solve-model`` and the helpers named with ``--allow-model NAME``; any other model gets
403 ``model_not_allowed`` and never reaches the upstream. Without ``--solve-model`` a paid
upstream is refused at startup; an upstream on this machine (a loopback address: a local
model server, a test's fake) is forwarded unpinned, every model named recorded.

The row gets the gateway's tokens and cost (source ``gateway``; unknown when a call could
not be priced) and its calls per model (``models``, source ``model_proxy``, refused calls
under the model asked with ``allowed: false``); ``model_gateway.json`` in the instance folder
has the details. A refusal at the per-task limit makes the instance the agent's failure
``per_task_limit_reached``.
Upstream failures (connection errors, 5xx) when the agent did not finish make it
infrastructure (``model_upstream_failed``).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from harness.agents.base import Agent, AgentOptions, AgentOutcome, AgentRequest, register_agent
from harness.agents.command import CommandAgent, CommandKind
from harness.core.errors import InfraError
from harness.core.fsutil import atomic_write_json
from harness.core.models import Tokens
from harness.model_proxy.network import BASE_URL, GatewayLink
from harness.model_proxy.pinning import ModelPin, pin_for
from harness.model_proxy.prices import ModelPrices, load_prices
from harness.model_proxy.server import SOCKET_NAME, GatewayServer
from harness.model_proxy.usage import InstanceMeter, MeterState

DEFAULT_KEY_ENV = "HARNESS_MODEL_API_KEY"
PLACEHOLDER_KEY = "harness-model-gateway"
USAGE_NAME = "model_gateway.json"


def gateway_upstream(options: AgentOptions, environ: Mapping[str, str]) -> tuple[str, str]:
    """``--model-upstream`` checked for any agent kind behind the model gateway: its base
    URL and the name of the variable holding the provider key (set, and never one the
    agent is given). ValueError naming the option and the fix otherwise."""
    upstream = options.model_upstream or ""
    if not upstream.startswith(("http://", "https://")):
        raise ValueError(f"--model-upstream {upstream!r}: give an http(s) base URL, "
                         f"e.g. https://openrouter.ai/api/v1")
    key_env = options.model_key_env or DEFAULT_KEY_ENV
    if not environ.get(key_env):
        raise ValueError(f"--model-upstream: the provider key ${key_env} is not set "
                         f"(export it, or name another variable with --model-key-env)")
    if key_env in options.env:
        raise ValueError(f"--agent-env {key_env}: that is the gateway's provider key; "
                         f"the agent never gets it (drop the option)")
    return upstream, key_env


def is_loopback_url(url: str) -> bool:
    """True when ``url``'s host is a loopback address or ``localhost`` (no name lookup)."""
    host = (urlsplit(url).hostname or "").strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def gateway_pin(options: AgentOptions) -> ModelPin | None:
    """The models the gateway forwards (``--solve-model`` and ``--allow-model``). Without
    ``--solve-model``: None (nothing pinned, every model recorded) for an upstream on this
    machine, else ValueError: a paid upstream is never left unpinned."""
    if options.solve_model:
        return pin_for(options.solve_model, options.allow_models)
    if options.allow_models:
        raise ValueError("--allow-model names a helper of the model under test: give that "
                         "model too, with --solve-model MODEL")
    if is_loopback_url(options.model_upstream or ""):
        return None
    raise ValueError(f"--model-upstream {options.model_upstream}: name the model under test "
                     f"with --solve-model MODEL (the gateway forwards only it and each "
                     f"--allow-model NAME)")


def sandbox_env() -> dict[str, str]:
    return {"OPENAI_BASE_URL": f"{BASE_URL}/v1", "OPENAI_API_BASE": f"{BASE_URL}/v1",
            "ANTHROPIC_BASE_URL": BASE_URL, "OPENAI_API_KEY": PLACEHOLDER_KEY,
            "ANTHROPIC_API_KEY": PLACEHOLDER_KEY, "HARNESS_MODEL_GATEWAY": f"{BASE_URL}/v1"}


class GatewayCommandAgent(CommandKind):

    def __init__(self, inner: CommandAgent, upstream: str, key_env: str, prices: ModelPrices,
                 limit_usd: float | None, environ: Mapping[str, str] | None = None,
                 pin: ModelPin | None = None) -> None:
        self.inner = inner
        self.upstream = upstream
        self.key_env = key_env
        self.prices = prices
        self.limit_usd = limit_usd
        self._environ = environ
        self.pin = pin

    @classmethod
    def from_options(cls, options: AgentOptions,
                     environ: Mapping[str, str] | None = None) -> GatewayCommandAgent:
        environ = os.environ if environ is None else environ
        if not options.command:
            raise ValueError("the command agent needs a command line (--agent-command)")
        upstream, key_env = gateway_upstream(options, environ)
        pin = gateway_pin(options)
        extra = sandbox_env()
        names = [n for n in options.env if n not in extra] + list(extra)
        overlay = {**{k: v for k, v in environ.items() if k != key_env}, **extra}
        config = CommandAgent.from_options(options.model_copy(update={"env": names})).config
        inner = CommandAgent(config, environ=overlay)
        return cls(inner, upstream, key_env, load_prices(options.model_prices),
                   options.per_task_limit_usd, environ, pin)

    def missing_env(self) -> list[str]:
        return self.inner.missing_env()

    def run(self, request: AgentRequest) -> AgentOutcome:
        environ = os.environ if self._environ is None else self._environ
        key = environ.get(self.key_env)
        if not key:
            raise InfraError(f"the provider key ${self.key_env} is gone", "model_gateway_failed")
        if request.sandbox is None:
            raise InfraError("the command agent needs a sandbox, none was given",
                             "agent_no_sandbox")
        meter = InstanceMeter(self.prices, self.limit_usd,
                              pinned=None if self.pin is None else self.pin.allowed)
        server = GatewayServer(self.upstream, key, meter, pin=self.pin).start()
        try:
            link = GatewayLink.open(request.sandbox, server.socket_dir, SOCKET_NAME)
            try:
                outcome = self.inner.run(request)
            finally:
                link.close()
        finally:
            server.close()
        state, update = gateway_update(meter, Path(request.instance_dir))
        update["output_paths"] = {**outcome.output_paths, **update.pop("paths")}
        update["details"] = {**outcome.details, **update["details"]}
        if state.limit_reached:
            update.update(completed=False, infra=False)
        elif state.upstream_errors and not outcome.completed and not outcome.infra:
            update.update(infra=True, reason_code="model_upstream_failed")
            update["details"]["model_upstream_failure"] = upstream_failure(state)
        return outcome.model_copy(update=update)


def upstream_failure(state: MeterState) -> str:
    """What failed an agent that could not go on after its provider did (a stream cut for
    silence, 429s past the wait ceiling, 5xx past the retries): the instance is then
    infrastructure (``model_upstream_failed``), never the model's failure, and
    ``--retry-infra`` runs it again."""
    kind = ("stream_stalled" if state.stalls else
            "rate_limited" if state.rate_limited else "upstream_errors")
    return f"{kind}: {state.upstream_errors} failed call(s)"


def gateway_update(meter: InstanceMeter, out_dir: Path) -> tuple[MeterState, dict[str, Any]]:
    """The meter's state, written to ``model_gateway.json`` in ``out_dir``, and the outcome's
    fields from it: cost, tokens, models, ``details`` (cost source, calls, refusals),
    ``paths`` (the file) and, past the per-task limit, ``reason_code``."""
    state = meter.snapshot()
    path = out_dir / USAGE_NAME
    atomic_write_json(path, state)
    known = state.cost_known
    update: dict[str, Any] = {
        "cost_usd": round(state.cost_usd, 12),
        "cost_known": known,
        "tokens": Tokens(prompt=state.prompt_tokens, completion=state.completion_tokens,
                         total=state.prompt_tokens + state.completion_tokens),
        "models": meter.models_called(),
        "paths": {"model_gateway": str(path)},
        "details": {"cost_source": "gateway" if known else "unknown",
                    "model_calls": state.calls, "model_refused": state.refused,
                    **({"model_not_allowed": state.model_not_allowed}
                       if state.model_not_allowed else {}),
                    **({"model_trouble": trouble} if (trouble := meter.trouble_record())
                       else {})},
    }
    if state.limit_reached:
        update["reason_code"] = "per_task_limit_reached"
    return state, update


@register_agent("command", CommandKind)
def _make(options: AgentOptions, environ: Mapping[str, str] | None = None) -> Agent:
    if options.model_upstream:  # the command agent behind the model gateway
        return GatewayCommandAgent.from_options(options, environ)
    if options.per_task_limit_usd is not None:
        raise ValueError("--per-task-limit-usd cannot be enforced for agent kind 'command' "
                         "without --model-upstream (the harness does not see its model "
                         "calls): add --model-upstream URL, or drop --per-task-limit-usd")
    return CommandAgent.from_options(options)
