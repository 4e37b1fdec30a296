"""The gateway agent's own task body (``own_body``) for a declared benchmark (Harbor), attacked.

The executor user is "never root": ``agent_user`` keeps the sandbox's user unless
``is_root_user`` says it is root, and the contract and the reference agent server refuse a
root user by the same check. It was by spelling (``root``, ``0``, ``0:<g>``), but
``docker exec -u`` resolves a numeric user with Go's ``strconv.Atoi``: ``00``, ``+0`` and
``-0`` are uid 0. A Harbor task folder's ``[agent] user = "00"`` became the sandbox's user,
then the body's ``executor_ref.user``, and the reference server ran every step as root; the
check now reads any numeric spelling of uid 0 as root.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import docker
import pytest

from benchmarks.harbor.benchmark import HarborBenchmark
from benchmarks.harbor.tasks import load_task
from harness.agents.base import AgentRequest, AgentTerms
from harness.agents.gateway.agent import GatewayAgent
from harness.agents.reference_server.execution import DockerExecExecutor
from harness.api import Trial

pytestmark = pytest.mark.docker

BASE = "harness/base"


def _task(root: Path, user: str) -> Path:
    folder = root / "root-by-spelling"
    (folder / "environment").mkdir(parents=True)
    (folder / "tests").mkdir()
    (folder / "environment" / "Dockerfile").write_text("FROM scratch\n")
    (folder / "tests" / "test.sh").write_text("exit 0\n")
    (folder / "instruction.md").write_text("do the thing\n")
    (folder / "task.toml").write_text(
        f'[agent]\nuser = "{user}"\n[environment]\nworkdir = "/tmp"\n')
    return folder


def _base_image(client: docker.DockerClient) -> str:
    tags = [t for img in client.images.list(name=BASE) for t in img.tags]
    assert tags, "no harness/base image: run ./scripts/setup.sh --tests"
    return tags[0]


@pytest.mark.parametrize("user", ["00", "+0"])
def test_executor_user_spelled_as_uid_zero_is_not_root(tmp_path: Path, user: str) -> None:
    task = load_task(_task(tmp_path, user))
    trial = cast(Trial, SimpleNamespace(data=task))
    plan = HarborBenchmark().sandbox(trial, "<image>")
    client = docker.from_env()
    container = client.containers.run(_base_image(client), ["sleep", "120"], detach=True,
                                      network_mode="none")
    try:
        sandbox = SimpleNamespace(name=container.name, user=plan.user,
                                  spec=SimpleNamespace(workdir=plan.workdir, network="none",
                                                       binds=()))
        request = AgentRequest(instance_id=task.name, instance_dir=tmp_path / "agent",
                               instruction=task.instruction, sandbox=sandbox,  # type: ignore[arg-type]
                               timeout_sec=60, adapter="harbor",
                               terms=AgentTerms(metadata={"harbor_task": task.name}))
        body = GatewayAgent("http://127.0.0.1:9")._body(request)
        ref = body.executor_ref
        assert ref is not None and ref.user is not None
        executor = DockerExecExecutor(ref.container_name or "", ref.workspace_backend_path,
                                      ref.user)  # the reference server's executor
        try:
            step = executor.run("id -u", timeout_s=30, env={}, stop=threading.Event())
        finally:
            executor.close()
        assert step.output_tail.strip() != "0", f"executor user {ref.user!r} runs as root"
    finally:
        container.remove(force=True)


def test_a_name_the_image_maps_to_root_is_not_the_executor_user(tmp_path: Path) -> None:
    """Root is what the sandbox's kernel says, not how the name is spelled: an image whose
    ``toor`` is uid 0, or whose ``staff0`` has gid 0, gets its steps run as ``agent``; an
    ordinary user keeps its own name."""
    from harness.agents.gateway.agent import agent_user
    from harness.sandbox.container import Sandbox, SandboxSpec

    client = docker.from_env()
    container = client.containers.run(_base_image(client), ["sleep", "120"], detach=True,
                                      network_mode="none")
    try:
        added = container.exec_run(["sh", "-c", "echo 'toor:x:0:1000::/tmp:/bin/sh' >> "
                                                "/etc/passwd && echo 'staff0:x:1001:0::/tmp:"
                                                "/bin/sh' >> /etc/passwd && echo 'worker:x:"
                                                "1002:1002::/tmp:/bin/sh' >> /etc/passwd"],
                                   user="0")
        assert added.exit_code == 0, added.output

        def as_user(user: str) -> str:
            spec = SandboxSpec(image="x", run_id="r", instance_id="i", run_root=tmp_path,
                               user=user)
            return agent_user(Sandbox(client, container.id, str(container.name), spec))

        assert as_user("toor") == "agent"  # uid 0 under another name
        assert as_user("staff0") == "agent"  # gid 0: root's group files
        assert as_user("worker") == "worker"
        assert as_user("nosuchuser") == "agent"  # cannot answer: taken as root
    finally:
        container.remove(force=True)
