"""The agent kinds and the module that registers each (no pydantic: option help and
collection read them). What a kind can do is its class's (its capabilities:
:class:`harness.agents.base.Agent`, asked through :func:`harness.agents.base.agent_class`),
never a table keyed by kind."""

from __future__ import annotations

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
