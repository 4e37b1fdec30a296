"""Point 7: sweeps by exact label that list again; stale runs are those proven dead (their
owner pid gone on this host, or an expired lease: tests/sandbox/test_sandbox_lease.py)."""

from __future__ import annotations

import multiprocessing
import os
import secrets
import shutil
import signal
from pathlib import Path

import docker
import pytest

from harness.sandbox import cleanup as sweep_mod
from harness.sandbox import labels as L
from harness.sandbox.cleanup import (
    leaked_resources,
    lock_is_held,
    remove_labelled,
    run_lock,
    sweep,
    sweep_stale,
)
from harness.sandbox.cli import sweep_command
from harness.sandbox.container import Sandbox, SandboxSpec
from harness.sandbox.errors import SweepIncomplete
from harness.sandbox.images.build import BuiltImage
from harness.sandbox.lease import Lease
from harness.sandbox.network import create_internal_network

pytestmark = pytest.mark.docker

EMPTY: dict[str, list[str]] = {"containers": [], "networks": [], "volumes": []}


def _spec(
    image: BuiltImage, run_id: str, root: Path, instance: str, worker: str = "main"
) -> SandboxSpec:
    return SandboxSpec(
        image=image.image_id, run_id=run_id, instance_id=instance, run_root=root, worker=worker
    )


def _volume(client: docker.DockerClient, run_id: str, root: Path) -> str:
    name = L.resource_name("harness-vol", run_id, "v")
    client.api.create_volume(name, labels=L.run_labels(run_id, "v", "main", root))
    return name


def test_sweep_removes_exactly_one_runs_resources(
    docker_client: docker.DockerClient, base_image: BuiltImage, run_root: Path, tmp_path: Path
) -> None:
    prefix = f"hxt-sw-{secrets.token_hex(3)}"
    mine, other = f"{prefix}-a", f"{prefix}-b"
    try:
        with run_lock(run_root).acquire(timeout=0):
            Sandbox.create(_spec(base_image, mine, run_root, "i1", "gw0"), client=docker_client)
            gw1 = Sandbox.create(
                _spec(base_image, mine, run_root, "i2", "gw1"), client=docker_client
            )
            net = create_internal_network(mine, "i1", "gw0", run_root, client=docker_client)
            vol = _volume(docker_client, mine, run_root)
            keep = Sandbox.create(_spec(base_image, other, run_root, "i1"), client=docker_client)
            # Only worker gw0's resources first.
            removed = sweep(mine, "gw0", client=docker_client)
            assert len(removed) == 2 and net in removed
            assert [
                n.split(" ")[0]
                for n in leaked_resources(docker_client, run_id_prefix=mine)["containers"]
            ] == [gw1.name]
            removed = sweep(mine, client=docker_client)
            assert set(removed) == {gw1.name, vol}
            assert leaked_resources(docker_client, run_id_prefix=mine) == EMPTY
            assert keep.is_running(), "another run's sandbox must survive"
            assert sweep(mine, client=docker_client) == []  # nothing left: a no-op
    finally:
        sweep(mine, client=docker_client)
        sweep(other, client=docker_client)


def test_remove_labelled_removes_one_instance_and_lists_again(
    docker_client: docker.DockerClient,
    base_image: BuiltImage,
    run_root: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_id = f"hxt-rl-{secrets.token_hex(3)}"
    try:
        with run_lock(run_root).acquire(timeout=0):
            one = Sandbox.create(_spec(base_image, run_id, run_root, "i1"), client=docker_client)
            two = Sandbox.create(_spec(base_image, run_id, run_root, "i2"), client=docker_client)
            net = create_internal_network(run_id, "i1", "main", run_root, client=docker_client)
            gone = remove_labelled({L.RUN: run_id, L.INSTANCE: "i1"}, client=docker_client)
            assert gone == {"containers": [one.name], "networks": [net], "volumes": []}
            assert [n.split(" ")[0] for n in leaked_resources(
                docker_client, run_id_prefix=run_id)["containers"]] == [two.name]
            assert remove_labelled({L.RUN: run_id, L.INSTANCE: "i1"},
                                   client=docker_client)["containers"] == []
            with pytest.raises(ValueError, match="at least one label"):
                remove_labelled({}, client=docker_client)
            monkeypatch.setattr(sweep_mod, "_remove", lambda *a: None)  # a daemon that refuses
            with pytest.raises(SweepIncomplete, match=two.name):
                remove_labelled({L.RUN: run_id}, client=docker_client, wait_s=0.3)
    finally:
        monkeypatch.undo()
        sweep(run_id, client=docker_client)
    assert leaked_resources(docker_client, run_id_prefix=run_id) == EMPTY


def test_sweep_that_cannot_remove_raises_sweep_incomplete(
    docker_client: docker.DockerClient,
    base_image: BuiltImage,
    run_root: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_id = f"hxt-inc-{secrets.token_hex(3)}"
    sb = Sandbox.create(_spec(base_image, run_id, run_root, "i"), client=docker_client)
    try:
        # Stand-in for a daemon that refuses removal: the verifying list must notice.
        monkeypatch.setattr(sweep_mod, "_remove", lambda *a: None)
        with pytest.raises(SweepIncomplete) as info:
            sweep(run_id, client=docker_client, wait_s=0.3)
        assert info.value.reason_code == "sweep_incomplete" and sb.name in str(info.value)
    finally:
        monkeypatch.undo()
        sweep(run_id, client=docker_client)
    assert leaked_resources(docker_client, run_id_prefix=run_id) == EMPTY


def _hold_run_with_sandboxes(
    image_id: str, run_id: str, root: str, ready: multiprocessing.synchronize.Event
) -> None:
    """A stand-in controller + worker: a lease, sandboxes (owned by this pid), then hang."""
    from harness.sandbox.client import get_client

    client = get_client()
    Lease(run_id, Path(root), ttl_s=600, client=client).renew()
    for inst in ("a", "b"):
        Sandbox.create(
            SandboxSpec(image=image_id, run_id=run_id, instance_id=inst, run_root=Path(root)),
            client=client,
        )
    create_internal_network(run_id, "a", "main", root, client=client)
    ready.set()
    signal.pause()


def test_sigkilled_run_is_swept_by_the_next_startup(
    docker_client: docker.DockerClient, base_image: BuiltImage, tmp_path: Path
) -> None:
    prefix = f"hxt-stale-{secrets.token_hex(3)}-"
    dead, gone, alive = f"{prefix}dead", f"{prefix}gone", f"{prefix}alive"
    dead_root, gone_root, alive_root = (tmp_path / n for n in ("dead", "gone", "alive"))
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    proc = ctx.Process(
        target=_hold_run_with_sandboxes, args=(base_image.image_id, dead, str(dead_root), ready)
    )
    proc.start()
    try:
        assert ready.wait(120), "the child did not start its sandboxes"
        # A live run (this process) whose root was deleted, and one whose root is here.
        lease = Lease(gone, gone_root, ttl_s=600, client=docker_client)
        lease.renew()
        Sandbox.create(_spec(base_image, gone, gone_root, "x"), client=docker_client)
        shutil.rmtree(gone_root, ignore_errors=True)
        live = Sandbox.create(_spec(base_image, alive, alive_root, "x"), client=docker_client)
        # While their owners live, no run is stale: a missing run root proves nothing.
        assert sweep_stale(docker_client, run_id_prefix=prefix) == []
        assert len(leaked_resources(docker_client, run_id_prefix=gone)["containers"]) == 1
        assert len(leaked_resources(docker_client, run_id_prefix=dead)["containers"]) == 2
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(30)
        assert proc.exitcode == -signal.SIGKILL
        # Another test's run may sweep first (every run sweeps stale runs at start-up):
        # what matters is that only `dead` is swept, and that it is gone.
        assert set(sweep_stale(docker_client, run_id_prefix=prefix)) <= {dead}
        assert leaked_resources(docker_client, run_id_prefix=dead) == EMPTY
        assert live.is_running()
        assert len(leaked_resources(docker_client, run_id_prefix=gone)["containers"]) == 1
        live.remove()
    finally:
        if proc.is_alive():
            proc.kill()
        for run_id in (dead, gone, alive):
            sweep(run_id, client=docker_client)


def test_sweep_cli(
    docker_client: docker.DockerClient,
    base_image: BuiltImage,
    run_root: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_id = f"hxt-cli-{secrets.token_hex(3)}"
    sb = Sandbox.create(_spec(base_image, run_id, run_root, "i"), client=docker_client)
    try:
        assert sweep_command(["--list", "--prefix", run_id]) == 0
        assert sb.name in capsys.readouterr().out
        assert sweep_command(["--run", run_id]) == 0
        assert sb.name in capsys.readouterr().out
        assert leaked_resources(docker_client, run_id_prefix=run_id) == EMPTY
        assert sweep_command(["--all-stale", "--prefix", run_id]) == 0
        assert "swept 0 stale run(s)" in capsys.readouterr().out
        assert sweep_command([]) == 2
        assert sweep_command(["--run", run_id, "--all-stale"]) == 2
        assert sweep_command(["--worker", "gw0", "--list"]) == 2
    finally:
        sweep(run_id, client=docker_client)


def test_cli_reports_docker_unavailable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    assert sweep_command(["--run", "whatever"]) == 1
    err = capsys.readouterr().err
    assert "docker_unavailable" in err and err[-1] == "\n" and err.count("\n") == 1


def test_leftovers_of_a_dead_owner_are_swept_even_with_a_run_lock_file(
    docker_client: docker.DockerClient, base_image: BuiltImage, tmp_path: Path
) -> None:
    """The run lock no longer decides: a child's network outlives it and is swept."""
    prefix = f"hxt-nolock-{secrets.token_hex(3)}-"
    run_id, root = f"{prefix}r", tmp_path / "unlocked"
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=create_internal_network, args=(run_id, "x", "main", root))
    try:
        with run_lock(root).acquire(timeout=0):  # held by this (live) process
            proc.start()
            proc.join(60)
            assert proc.exitcode == 0 and lock_is_held(root)
            net = leaked_resources(docker_client, run_id_prefix=run_id)["networks"]
            assert len(net) == 1
            assert set(sweep_stale(docker_client, run_id_prefix=prefix)) <= {run_id}
            assert leaked_resources(docker_client, run_id_prefix=run_id) == EMPTY
    finally:
        sweep(run_id, client=docker_client)
