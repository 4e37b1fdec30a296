"""Admission refuses a run whose engines cannot work, in one line, exit 2, before any
instance starts (harness.runner.engine_admission): an engine that does not answer, a gateway
agent with a remote engine, a relay with a remote engine. No Docker: each refusal comes
before any engine is used (an unreachable engine is one that does not answer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.agents.base import agent_class
from harness.agents.kinds import AGENT_KINDS
from harness.runner.engine_admission import gateway_refusal, relay_refusal
from harness.sandbox.engines import brief_error
from tests.support.suite import Run, Suite

NOWHERE = "unix:///nonexistent/harness-engine-admission.sock"
CLOSED_PORT = "tcp://127.0.0.1:9"  # discard: nothing listens there


def refused(run: Run, reason: str) -> str:
    """The run was refused for ``reason`` before any instance: exit 2, its one line and
    nothing else on the terminal (no traceback), the refusal in the manifest, no row."""
    assert run.rc == 2, run.out
    refusal = run.manifest["refusal"]
    assert refusal["reason"] == reason and refusal["stage"] == "engines", refusal
    message = refusal["message"]
    assert "\n" not in message
    assert "Traceback" not in run.out
    assert run.out.strip().splitlines() == [f"Exit: {message}"], run.out
    assert run.manifest["outcome"] == "refused" and run.manifest["exit_code"] == 2
    assert run.rows == []
    return str(message)


@pytest.fixture
def agent_suite(tmp_path: Path) -> Suite:
    """A suite whose one task runs an agent in a Docker sandbox (it needs an engine)."""
    suite = Suite(tmp_path, {"HARNESS_MODEL_API_KEY": "k"})
    suite.tasks([{"id": "t", "work": "agent"}])
    return suite


def test_a_local_engine_that_does_not_answer_refuses_the_run(agent_suite: Suite) -> None:
    agent_suite.extra_env["DOCKER_HOST"] = NOWHERE
    run = agent_suite.run("--agent", "oracle", "--harness-progress", "off")
    message = refused(run, "engine_unreachable")
    assert message == (
        f"the Docker engine {NOWHERE} (DOCKER_HOST) does not answer: No such file or "
        "directory; start Docker (e.g. `sudo systemctl start docker`), or point DOCKER_HOST "
        "or --docker-host at a running engine")
    # before the run's first Docker call: no lease was tried, no start-up sweep
    assert run.manifest["extra"].get("sweeps") is None


def test_a_run_that_needs_no_engine_does_not_ask_for_one(agent_suite: Suite) -> None:
    """A dry run, and a run of work that uses no sandbox, start without an engine."""
    agent_suite.extra_env["DOCKER_HOST"] = NOWHERE
    dry = agent_suite.run("--agent", "oracle", "--dry-run", "--no-report")
    assert dry.rc == 0, dry.out
    assert dry.manifest["outcome"] == "dry_run" and dry.manifest.get("refusal") is None
    agent_suite.tasks([{"id": "plain", "work": "succeed"}])
    plain = agent_suite.run("--agent", "oracle", "--no-report")
    assert plain.rc == 0, plain.out
    assert plain.statuses() == {"plain": "completed"}


def test_no_engine_of_the_options_answering_is_one_line(agent_suite: Suite) -> None:
    run = agent_suite.run("--agent", "oracle", "--docker-host", CLOSED_PORT)
    message = refused(run, "no_engine")
    assert message == (f"no engine of --docker-host/--engines answers: {CLOSED_PORT}: "
                       "Connection refused; start them, or fix --docker-host/--engines")
    [engine] = run.manifest["extra"]["engines"]
    assert engine["url"] == CLOSED_PORT and engine["reachable"] is False


@pytest.mark.parametrize("url", [CLOSED_PORT, "ssh://runner@build-1"])
def test_the_gateway_agent_with_a_remote_engine_is_refused_before_any_contact(
    agent_suite: Suite, tmp_path: Path, url: str
) -> None:
    """Its server execs into the sandbox on its own engine: refused before any engine,
    agent server (no --gateway-url here) or campaign is asked."""
    engines = tmp_path / "engines.json"
    engines.write_text(json.dumps({"engines": [{"url": "local"}, {"url": url}]}))
    run = agent_suite.run("--agent", "gateway", "--engines", str(engines))
    message = refused(run, "gateway_remote_engine")
    assert message.startswith(f"--agent gateway with the remote engine {url} of "
                              "--docker-host/--engines: the agent server runs `docker exec` "
                              "on its own engine"), message
    assert "--agent command, host-command or mini-swe-agent" in message
    assert run.manifest["extra"].get("engines") is None  # no engine was probed
    assert run.manifest["extra"].get("agent") is None  # nor the agent built


def test_a_relay_with_a_remote_docker_host_is_refused(agent_suite: Suite) -> None:
    """Without --docker-host the local engine is DOCKER_HOST's: an ssh:// one is another
    machine, where the model gateway's relay cannot mount this machine's socket."""
    agent_suite.extra_env["DOCKER_HOST"] = "ssh://runner@build-1"
    run = agent_suite.run("--agent", "command", "--agent-command", "true",
                          "--model-upstream", "http://127.0.0.1:9/v1")
    message = refused(run, "relay_remote_engine")
    assert message == (
        "--model-upstream with --agent command: the model gateway's relay mounts a socket of "
        "this machine and cannot reach a sandbox on the remote engine ssh://runner@build-1 "
        "(DOCKER_HOST); run it on local or unix:// engines only (point DOCKER_HOST at a "
        "unix:// socket, or unset it)")


def test_which_agents_and_benchmarks_start_a_relay() -> None:
    """Every relay path is named (the command agent behind the model gateway, the gateway
    agent's tool route to Cowork's MCP servers); host-command and mini-swe-agent, whose model
    gateway is on the runner's loopback, start none and run on remote engines."""
    from benchmarks.cowork_bench.adapter import CoworkAdapter
    from benchmarks.programbench.adapter import ProgramBenchAdapter

    far = ["local", "tcp://10.0.0.5:2376"]
    relays = {kind: agent_class(kind).relays for kind in AGENT_KINDS}  # the classes say
    assert {k: r for k, r in relays.items() if r} == {"command": ("model_gateway",),
                                                       "gateway": ("tool_route",)}
    assert CoworkAdapter.tool_routes and not ProgramBenchAdapter.tool_routes
    route = relay_refusal("gateway", None, None, far, tool_routes=["cowork_bench"])
    assert route is not None and route.startswith(
        "--agent gateway with cowork_bench: the tool route's relay mounts a socket")
    assert relay_refusal("gateway", None, None, far) is None  # no tools to route
    assert relay_refusal("gateway", None, None, ["local"], tool_routes=["cowork_bench"]) is None
    for kind in ("host-command", "mini-swe-agent", "oracle", "nop"):
        assert relay_refusal(kind, "https://u/v1", None, far, tool_routes=["c"]) is None, kind
        assert gateway_refusal(kind, far) is None, kind
    assert relay_refusal("command", "https://u/v1", None, far) is not None
    assert gateway_refusal("gateway", ["local", "unix:///x.sock"]) is None
    assert "tcp://10.0.0.5:2376" in (gateway_refusal("gateway", far) or "")


@pytest.mark.parametrize(("error", "brief"), [
    ("DockerException: Error while fetching server API version: ('Connection aborted.', "
     "FileNotFoundError(2, 'No such file or directory'))", "No such file or directory"),
    ("DockerException: Error while fetching server API version: HTTPConnectionPool(host="
     "'127.0.0.1', port=9): Max retries exceeded with url: /version (Caused by NewConnection"
     "Error(\"HTTPConnection(host='127.0.0.1', port=9): Failed to establish a new connection:"
     " [Errno 111] Connection refused\"))", "Connection refused"),
    ("('Connection aborted.', PermissionError(13, 'Permission denied'))", "Permission denied"),
    ("ReadTimeout: UnixHTTPConnectionPool(host='localhost', port=None): Read timed out. "
     "(read timeout=10)", "timed out"),
    ("DockerException: Install paramiko package to enable ssh:// support",
     "Install paramiko package to enable ssh:// support"),
    ("TunnelError: ssh exited 255:\n  Permission denied (publickey).\n" + "x" * 300, None),
])
def test_an_engine_error_in_a_few_words(error: str, brief: str | None) -> None:
    said = brief_error(error)
    assert "\n" not in said and len(said) <= 160
    if brief is not None:
        assert said == brief
    else:
        assert said.startswith("TunnelError: ssh exited 255: Permission denied (publickey).")
