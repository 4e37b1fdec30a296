"""The agent interface: factory, ``nop``, ``oracle`` (callable, plan, unavailable)."""

from __future__ import annotations

import pytest

from harness.agents import AgentOutcome, AgentRequest, OraclePlan, OracleUnavailable, make_agent
from harness.agents.command import CommandAgent
from harness.agents.gateway.agent import GatewayAgent
from harness.core.errors import InfraError


def _request(tmp_path, **kw) -> AgentRequest:
    return AgentRequest(
        instance_id="i1",
        instance_dir=tmp_path / "inst",
        instruction="do it",
        adapter="selftest",
        **kw,
    )


def test_factory_kinds_and_one_line_errors():
    assert make_agent("nop").kind == "nop"
    assert make_agent("oracle").kind == "oracle"
    assert isinstance(make_agent("command", {"command": "true"}), CommandAgent)
    assert isinstance(make_agent("gateway", {"gateway_url": "http://127.0.0.1:1"}), GatewayAgent)
    with pytest.raises(ValueError) as info:
        make_agent("claude")
    assert str(info.value) == (
        "unknown agent kind 'claude': use one of nop, oracle, command, gateway, "
        "mini-swe-agent, host-command"
    )
    with pytest.raises(ValueError, match="--agent-command"):
        make_agent("command")
    with pytest.raises(ValueError, match="--gateway-url"):
        make_agent("gateway")
    with pytest.raises(ValueError, match="not environment variable names") as bad:
        make_agent("command", {"command": "true", "env": ["BAD NAME"]})
    assert "\n" not in str(bad.value) and str(bad.value).startswith("--agent command: ")
    with pytest.raises(ValueError, match="instruction_via"):
        make_agent("command", {"command": "true", "instruction_via": "carrier-pigeon"})
    agent = make_agent("command", {"command": "true", "env": ["HOME", "HX_SURELY_UNSET"]})
    assert isinstance(agent, CommandAgent)
    assert agent.missing_env() == ["HX_SURELY_UNSET"]


def test_command_agent_behind_the_model_gateway_keeps_the_kill_timings(monkeypatch):
    monkeypatch.setenv("HARNESS_MODEL_API_KEY", "sk-kinds-test")
    agent = make_agent("command", {"command": "true", "model_upstream": "http://127.0.0.1:1",
                                   "kill_after_s": 3.0, "exec_margin_s": 4.0})
    config = agent.inner.config  # type: ignore[attr-defined]
    assert (config.kill_after_s, config.exec_margin_s) == (3.0, 4.0)


def test_a_kind_taped_at_the_model_gateway_reads_the_environment_it_is_given(monkeypatch):
    """``make_agent(kind, options, environ)``: a kind whose calls are taped at the model
    gateway (its class's ``tape_route``) takes its key from the given environment, not the runner's (a
    replay's gateway holds a stand-in key)."""
    from harness.agents.base import agent_class, tape_kinds
    from harness.agents.kinds import AGENT_KINDS

    monkeypatch.delenv("HX_KINDS_TEST_KEY", raising=False)
    options = {"command": "true", "model_upstream": "http://127.0.0.1:1",
               "model_key_env": "HX_KINDS_TEST_KEY"}
    assert tape_kinds() == ["command", "mini-swe-agent", "host-command"]
    gateway_taped = [k for k in AGENT_KINDS if agent_class(k).tape_route == "model_gateway"]
    assert gateway_taped == ["command", "host-command"]
    for kind in gateway_taped:
        with pytest.raises(ValueError, match="HX_KINDS_TEST_KEY"):
            make_agent(kind, options)  # the runner's environment has no key
        agent = make_agent(kind, options, {"HX_KINDS_TEST_KEY": "sk-given"})
        assert agent.kind == kind


def test_nop_completes(tmp_path):
    outcome = make_agent("nop").run(_request(tmp_path))
    assert outcome.completed and not outcome.infra and outcome.cost_usd == 0.0


def test_oracle_without_solution_is_a_skip_signal(tmp_path):
    with pytest.raises(OracleUnavailable) as info:
        make_agent("oracle").run(_request(tmp_path))
    assert info.value.reason == "oracle_unavailable" and "i1" in str(info.value)


def test_oracle_callable(tmp_path):
    applied: list[str] = []

    def oracle(request: AgentRequest) -> AgentOutcome | None:
        applied.append(request.instance_id)
        return None

    outcome = make_agent("oracle").run(_request(tmp_path, oracle=oracle))
    assert applied == ["i1"] and outcome.completed and outcome.reason_code == "oracle_applied"
    assert outcome.duration_s is not None


def test_oracle_callable_may_raise_unavailable(tmp_path):
    def oracle(request: AgentRequest) -> AgentOutcome | None:
        raise OracleUnavailable("no gold patch for i1", reason="no_gold_patch")

    with pytest.raises(OracleUnavailable) as info:
        make_agent("oracle").run(_request(tmp_path, oracle=oracle))
    assert info.value.reason == "no_gold_patch"


def test_oracle_plan_runs_in_a_real_sandbox(tmp_path, sandbox_factory):
    sb = sandbox_factory()
    plan = OraclePlan(commands=["echo solved > /workspace/answer.txt"])
    outcome = make_agent("oracle").run(_request(tmp_path, oracle=plan, sandbox=sb))
    assert outcome.completed
    check = sb.exec(["cat", "/workspace/answer.txt"], timeout=30)
    assert check.stdout == b"solved\n"
    failing = OraclePlan(commands=["exit 4"])
    with pytest.raises(InfraError) as info:
        make_agent("oracle").run(_request(tmp_path, oracle=failing, sandbox=sb))
    assert info.value.reason_code == "oracle_failed"


def test_each_kind_says_what_it_can_do_on_its_class():
    """The runner asks a kind's class (``harness.agents.base.agent_capabilities``; a
    benchmark gets them as ``Trial.agent``), never a table keyed by kind; an unknown kind is
    one line."""
    from harness.agents.base import agent_capabilities
    from harness.agents.kinds import AGENT_KINDS

    caps = {kind: agent_capabilities(kind) for kind in AGENT_KINDS}
    assert all(c.kind == k for k, c in caps.items())
    assert [k for k, c in caps.items() if c.remote_server] == ["gateway"]
    assert [k for k, c in caps.items() if c.reattaches] == ["gateway"]
    assert [k for k, c in caps.items() if c.needs_reference_solution] == ["oracle"]
    # Cowork offers its tools as mcp-call to a shell-only agent, seeds one that runs inside
    assert [k for k, c in caps.items() if c.shell_only] == ["mini-swe-agent"]
    assert [k for k, c in caps.items() if c.runs_in_sandbox] == ["command"]
    assert {k: c.tape_route for k, c in caps.items() if c.tape_route} == {
        "command": "model_gateway", "mini-swe-agent": "in_process",
        "host-command": "model_gateway"}
    with pytest.raises(ValueError, match="unknown agent kind 'bogus'") as info:
        agent_capabilities("bogus")
    assert "\n" not in str(info.value)


def test_both_command_agents_are_of_the_command_kind():
    """``--agent command`` builds one of two agents (plain, or behind the model gateway);
    both are instances of the class whose capabilities the runner reads."""
    from harness.agents.base import agent_class

    cls = agent_class("command")
    plain = make_agent("command", {"command": "true"})
    proxied = make_agent("command", {"command": "true", "model_upstream": "http://127.0.0.1:1",
                                     "model_key_env": "HX_KINDS_TEST_KEY"},
                         {"HX_KINDS_TEST_KEY": "sk-given"})
    assert isinstance(plain, cls) and isinstance(proxied, cls)
