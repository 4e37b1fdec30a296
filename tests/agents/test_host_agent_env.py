"""The host agent's environment: the basics and Python's settings, never the runner's keys."""

from __future__ import annotations

from harness.agents.host_command import agent_environment


def test_bytecode_settings_reach_the_agent_and_keys_do_not() -> None:
    runner = {"PATH": "/usr/bin", "PYTHONDONTWRITEBYTECODE": "1",
              "PYTHONPYCACHEPREFIX": "/cache/pyc", "OPENAI_API_KEY": "sk-runner",
              "HARNESS_MODEL_API_KEY": "sk-gateway", "AGENT_KEY": "named", "LC_ALL": "C"}  # fmt: skip
    env = agent_environment(runner, ["AGENT_KEY"])
    # the agent's own `harness exec` writes no bytecode into the installation
    assert env["PYTHONDONTWRITEBYTECODE"] == "1" and env["PYTHONPYCACHEPREFIX"] == "/cache/pyc"
    assert env["AGENT_KEY"] == "named" and env["LC_ALL"] == "C"
    assert "OPENAI_API_KEY" not in env and "HARNESS_MODEL_API_KEY" not in env
