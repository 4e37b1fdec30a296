"""Both sandboxes the agents get implement the contract (:mod:`harness.sandbox.protocol`),
without Docker: mypy checks the structure (the annotated assignments below), and at run time
every member is there and ``exec`` takes every argument the contract names. The behaviour is
checked on Docker by :mod:`tests.sandbox.test_self_check`."""

from __future__ import annotations

import inspect
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import docker
import pytest

from benchmarks.cowork_bench.agents import AgentBox
from harness.sandbox.container import Sandbox as HarnessSandbox
from harness.sandbox.container import SandboxSpec
from harness.sandbox.protocol import Sandbox

# Checked by mypy: both classes' instances are Sandboxes (a missing or mistyped member
# fails it)
_HARNESS_IS_A_SANDBOX: type[Sandbox] = HarnessSandbox
_AGENT_BOX_IS_A_SANDBOX: type[Sandbox] = AgentBox


def _offline_sandbox() -> HarnessSandbox:
    """A Sandbox object with no container behind it (nothing here talks to Docker)."""
    client = cast(docker.DockerClient, SimpleNamespace(api=None))
    spec = SandboxSpec(image="none", run_id="r", instance_id="i", run_root=Path("/nonexistent"),
                       user="agent", workdir="/workspace")
    return HarnessSandbox(client, "0" * 64, "harness-r-i", spec)


def _implementations() -> dict[str, Sandbox]:
    sb = _offline_sandbox()
    return {"harness": sb, "cowork": AgentBox(sb)}


@pytest.mark.parametrize("name", ["harness", "cowork"])
def test_every_member_of_the_contract_is_there(name: str) -> None:
    box = _implementations()[name]
    assert isinstance(box, Sandbox)
    assert (box.name, box.id, box.user) == ("harness-r-i", "0" * 64, "agent")
    assert box.workdir == ("/workspace" if name == "harness" else "/workspace/dumps/workspace")


@pytest.mark.parametrize("name", ["harness", "cowork"])
def test_exec_takes_every_argument_of_the_contract(name: str) -> None:
    box = _implementations()[name]
    contract = inspect.signature(Sandbox.exec).parameters
    own = inspect.signature(box.exec).parameters
    for param in list(contract.values())[1:]:  # self aside
        assert param.name in own, f"{name}.exec has no {param.name!r}"
        assert own[param.name].kind == param.kind, param.name
        assert (own[param.name].default is inspect.Parameter.empty) == (
            param.default is inspect.Parameter.empty), param.name


def test_a_class_missing_a_member_is_not_a_sandbox() -> None:
    class Partial:  # exec and names, but no death detection or copies
        name = id = user = "x"
        workdir = None

        def exec(self, cmd: str) -> None: ...

    assert not isinstance(Partial(), Sandbox)
