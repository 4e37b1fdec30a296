"""Agents: ``nop``, ``oracle``, ``command`` (a CLI agent in the sandbox) and ``gateway``
(a task on an agent server over HTTP), behind one small interface (:mod:`.base`)."""

from harness.agents.base import (
    AGENT_KINDS,
    Agent,
    AgentOptions,
    AgentOutcome,
    AgentRequest,
    OraclePlan,
    OracleUnavailable,
    RuntimeOutcome,
    make_agent,
)

__all__ = [
    "AGENT_KINDS",
    "Agent",
    "AgentOptions",
    "AgentOutcome",
    "AgentRequest",
    "OraclePlan",
    "OracleUnavailable",
    "RuntimeOutcome",
    "make_agent",
]
