"""The ``oracle`` agent: applies the adapter's reference solution.

The adapter supplies it as a callable (``oracle(request) -> AgentOutcome | None``) or as
an :class:`OraclePlan` of shell commands run in the sandbox. Without one, the instance is
skipped (:class:`OracleUnavailable`), never scored as a failure.
"""

from __future__ import annotations

import time
from pathlib import Path

from harness.agents.base import (
    Agent,
    AgentOptions,
    AgentOutcome,
    AgentRequest,
    OraclePlan,
    OracleUnavailable,
    register_agent,
)
from harness.core.errors import InfraError


class OracleAgent(Agent):
    kind = "oracle"
    needs_reference_solution = True

    def run(self, request: AgentRequest) -> AgentOutcome:
        oracle = request.oracle
        if oracle is None:
            raise OracleUnavailable(
                f"{request.adapter}: no reference solution for instance {request.instance_id}"
            )
        started = time.monotonic()
        if isinstance(oracle, OraclePlan):
            outcome = self._run_plan(oracle, request)
        else:
            outcome = oracle(request) or AgentOutcome(
                agent=self.kind, completed=True, reason_code="oracle_applied"
            )
        if outcome.duration_s is None:
            outcome = outcome.model_copy(update={"duration_s": time.monotonic() - started})
        return outcome

    def _run_plan(self, plan: OraclePlan, request: AgentRequest) -> AgentOutcome:
        if request.sandbox is None:
            raise InfraError("oracle plan needs a sandbox, none was given", "oracle_no_sandbox")
        for src, dest in plan.folders:
            request.sandbox.copy_in(Path(src), dest)
        for index, command in enumerate(plan.commands):
            result = request.sandbox.exec(
                ["bash", "-c", command],
                user=plan.user,
                timeout=plan.timeout_sec or request.timeout_sec,
            )
            if result.timed_out or result.exit_code != 0:
                raise InfraError(
                    f"oracle step {index} exited {result.exit_code}"
                    f"{' (timed out)' if result.timed_out else ''}: the reference solution "
                    "must apply cleanly",
                    "oracle_failed",
                )
        return AgentOutcome(
            agent=self.kind,
            completed=True,
            reason_code="oracle_applied",
            cost_usd=0.0,
            cost_known=True,
        )


@register_agent("oracle", OracleAgent)
def _make(options: AgentOptions) -> Agent:
    return OracleAgent()
