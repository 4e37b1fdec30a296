"""Agents: ``nop``, ``oracle``, ``command`` (a CLI agent in the sandbox) and ``gateway``
(a task on an agent server over HTTP), behind one small interface (:mod:`.base`)."""

from typing import TYPE_CHECKING

from harness.core.lazy import lazy_exports

if TYPE_CHECKING:
    from harness.agents.base import (
        AGENT_KINDS,
        Agent,
        AgentOptions,
        AgentOutcome,
        AgentRequest,
        InstanceView,
        OraclePlan,
        OracleUnavailable,
        RuntimeOutcome,
        make_agent,
    )

# Loaded on first use (PEP 562): importing one submodule does not import them all
# (the collection path stays off Docker and the heavy models).
_LAZY = {
    "AGENT_KINDS": "harness.agents.base",
    "Agent": "harness.agents.base",
    "AgentOptions": "harness.agents.base",
    "AgentOutcome": "harness.agents.base",
    "AgentRequest": "harness.agents.base",
    "InstanceView": "harness.agents.base",
    "OraclePlan": "harness.agents.base",
    "OracleUnavailable": "harness.agents.base",
    "RuntimeOutcome": "harness.agents.base",
    "make_agent": "harness.agents.base",
}


__getattr__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "AGENT_KINDS",
    "Agent",
    "AgentOptions",
    "AgentOutcome",
    "AgentRequest",
    "InstanceView",
    "OraclePlan",
    "OracleUnavailable",
    "RuntimeOutcome",
    "make_agent",
]
