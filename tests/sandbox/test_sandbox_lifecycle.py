"""Point 2 (and 7's per-sandbox half): labelled, limited containers, removed provably."""

from __future__ import annotations

import re
import time
from pathlib import Path

import docker
import pytest

from harness.sandbox import labels as L
from harness.sandbox.container import Sandbox, SandboxSpec
from harness.sandbox.errors import ContainerStartFailed
from harness.sandbox.images.build import BuiltImage

pytestmark = pytest.mark.docker

FORK_UNTIL_REFUSED = """
import os, signal, time
kids = []
try:
    while len(kids) < 200:
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        kids.append(pid)
    err = 0
except OSError as exc:
    err = exc.errno
for pid in kids:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
print(len(kids), err)
"""


def _listed(client: docker.DockerClient, container_id: str) -> bool:
    return bool(client.api.containers(all=True, filters={"id": container_id}))


def test_resource_names_are_sanitized_truncated_and_unique() -> None:
    long_run = "run-" + "x" * 80
    names = {L.resource_name("harness", long_run, "owner/repo@weird id!" * 5) for _ in range(50)}
    assert len(names) == 50
    for name in names:
        assert len(name) <= L.MAX_NAME
        assert re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+", name), name
        assert name.startswith("harness-run-xxx")
    assert re.fullmatch(r"harness-r1-i\.1-[0-9a-f]{8}", L.resource_name("harness", "r1", "i.1"))


def test_spec_becomes_labels_limits_and_a_sleep_ttl(
    docker_client: docker.DockerClient, base_image: BuiltImage, run_root: Path, own_run: str
) -> None:
    spec = SandboxSpec(
        image=base_image.image_id,
        run_id=own_run,
        instance_id="owner__repo.abc",
        run_root=run_root,
        worker="gw3",
        ttl_s=900,
        cpus=0.5,
        memory="256m",
        pids_limit=64,
        cap_drop=("SYS_PTRACE",),
        user="agent",
        workdir="/workspace",
    )
    with Sandbox.create(spec, client=docker_client) as sb:
        info = docker_client.api.inspect_container(sb.id)
        assert info["Name"].lstrip("/") == sb.name
        assert sb.name.startswith(f"harness-{own_run}-owner__repo.abc-")
        labels = info["Config"]["Labels"]
        assert labels[L.RUN] == own_run and labels[L.INSTANCE] == "owner__repo.abc"
        assert labels[L.WORKER] == "gw3" and labels[L.RUN_ROOT] == str(run_root.absolute())
        host = info["HostConfig"]
        assert host["NetworkMode"] == "none"
        assert host["NanoCpus"] == 500_000_000
        assert host["Memory"] == 256 << 20 and host["MemorySwap"] == host["Memory"]
        assert host["PidsLimit"] == 64 and host["CapDrop"] == ["SYS_PTRACE"]
        assert host["AutoRemove"] is True and host["Init"] is True
        assert info["Config"]["Cmd"] == ["sleep", "900"]
        res = sb.exec("id -un; pwd; ps -o args= -p 1; ps -eo args | grep -c '^sleep 900$'")
        assert res.stdout.decode().split("\n")[:2] == ["agent", "/workspace"]
        assert res.stdout.decode().split("\n")[3] == "1"
        assert sb.exec(["id", "-u"], user="root").stdout == b"0\n"
    assert not _listed(docker_client, sb.id)


def test_limits_are_enforced(
    docker_client: docker.DockerClient, base_image: BuiltImage, run_root: Path, own_run: str
) -> None:
    spec = SandboxSpec(
        image=base_image.image_id,
        run_id=own_run,
        instance_id="limits",
        run_root=run_root,
        memory="96m",
        pids_limit=40,
        user="agent",
    )
    with Sandbox.create(spec, client=docker_client) as sb:
        mem = sb.exec(
            ["python3", "-c", "b = bytearray(400 << 20); b[::4096] = b'x' * len(b[::4096])"],
            timeout=60,
        )
        assert mem.exit_code == 137, mem  # OOM-killed: no swap to escape into
        pids = sb.exec(["python3", "-c", FORK_UNTIL_REFUSED], timeout=60)
        forked, errno = map(int, pids.stdout.split())
        assert 20 < forked < 40 and errno == 11, pids  # EAGAIN at the PID limit
        assert sb.exec("echo still fine", timeout=30).stdout == b"still fine\n"


def test_remove_is_verified_and_idempotent(
    docker_client: docker.DockerClient, base_image: BuiltImage, run_root: Path, own_run: str
) -> None:
    sb = Sandbox.create(
        SandboxSpec(image=base_image.image_id, run_id=own_run, instance_id="rm", run_root=run_root),
        client=docker_client,
    )
    assert _listed(docker_client, sb.id) and sb.is_running()
    sb.remove()
    assert not _listed(docker_client, sb.id)
    sb.remove()  # already gone: fine
    assert not sb.is_running()


def test_context_manager_removes_on_error(
    docker_client: docker.DockerClient, base_image: BuiltImage, run_root: Path, own_run: str
) -> None:
    spec = SandboxSpec(
        image=base_image.image_id, run_id=own_run, instance_id="ctx", run_root=run_root
    )
    with pytest.raises(RuntimeError), Sandbox.create(spec, client=docker_client) as sb:
        raise RuntimeError("boom")
    assert not _listed(docker_client, sb.id)


def test_orphan_expires_by_itself_after_its_ttl(
    docker_client: docker.DockerClient, base_image: BuiltImage, run_root: Path, own_run: str
) -> None:
    sb = Sandbox.create(
        SandboxSpec(
            image=base_image.image_id, run_id=own_run, instance_id="ttl", run_root=run_root, ttl_s=2
        ),
        client=docker_client,
    )
    assert _listed(docker_client, sb.id)
    deadline = time.monotonic() + 20
    while _listed(docker_client, sb.id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _listed(docker_client, sb.id), "sleep <ttl> ended, auto_remove must delete it"


def test_start_failure_is_infra_and_leaves_nothing(
    docker_client: docker.DockerClient, base_image: BuiltImage, run_root: Path, own_run: str
) -> None:
    spec = SandboxSpec(
        image=base_image.image_id,
        run_id=own_run,
        instance_id="bad",
        run_root=run_root,
        network="harness-test-no-such-network",
    )
    with pytest.raises(ContainerStartFailed) as info:
        Sandbox.create(spec, client=docker_client)
    assert info.value.reason_code == "container_start_failed"
    assert docker_client.api.containers(all=True, filters={"label": f"{L.RUN}={own_run}"}) == []


def test_sandbox_fixture_is_a_labelled_agent_sandbox(sandbox: Sandbox, harness_instance) -> None:
    assert sandbox.spec.run_id == harness_instance.run_id
    assert sandbox.spec.instance_id == harness_instance.instance_id
    assert sandbox.spec.worker == harness_instance.worker_id
    assert sandbox.exec("id -un").stdout == b"agent\n"
    assert sandbox.spec.network == "none" and "SYS_PTRACE" in sandbox.spec.cap_drop
