"""The agent kinds and the module that registers each (no pydantic: option help and
collection read them)."""

from __future__ import annotations

from typing import Literal

# kind -> the module that registers it (``@register_agent(kind)``) when imported; a module
# is imported only when its kind is asked for. Add a kind by adding its module here.
AGENT_MODULES: dict[str, str] = {
    "nop": "harness.agents.base",
    "oracle": "harness.agents.oracle",
    "command": "harness.agents.command_proxy",  # plain, or behind --model-upstream
    "gateway": "harness.agents.gateway.agent",
    "mini-swe-agent": "harness.agents.mini_swe",
    "host-command": "harness.agents.host_command",
}
AGENT_KINDS = tuple(AGENT_MODULES)

# kind -> how its model calls pass through the harness, so ``--model-record`` and
# ``--model-replay`` can tape them; a kind absent here calls its model outside the harness.
# "model_gateway": through the model gateway the harness runs for it (``--model-upstream``;
# a replay gives it a gateway with no upstream and no key: its factory takes ``environ``);
# "in_process": the kind routes its own calls and says what it cannot tape
# (``Agent.tape_problem``).
TapeRoute = Literal["model_gateway", "in_process"]
TAPE_ROUTES: dict[str, TapeRoute] = {
    "command": "model_gateway",
    "host-command": "model_gateway",
    "mini-swe-agent": "in_process",
}
TAPE_KINDS = tuple(TAPE_ROUTES)

# kind -> the relay containers the runner starts beside its sandbox, each bind-mounting a
# socket of this machine, so none works on an engine of another machine (an ``ssh://`` or
# ``tcp://`` one): "model_gateway", behind the model gateway (``--model-upstream`` or
# ``--model-replay``: :mod:`harness.model_proxy.network`); "tool_route", an agent server's
# route to the tools a benchmark serves on the task's network (a benchmark with
# ``tool_routes``: :mod:`harness.agents.gateway.tool_route`). Kinds not listed start none:
# host-command and mini-swe-agent keep their model gateway on a loopback port of the
# runner and drive the sandbox through the engine's API (as oracle and nop do), which
# reaches a remote engine too.
Relay = Literal["model_gateway", "tool_route"]
RELAYS: dict[str, tuple[Relay, ...]] = {
    "command": ("model_gateway",),
    "gateway": ("tool_route",),
}
