"""Issue 11 item 8: the stale sweep removes only runs proven dead, never another host's live
run on the same engine. Each test makes its own runs (unique ids) and sweeps by prefix."""

from __future__ import annotations

import multiprocessing
import secrets
import time
from pathlib import Path

import docker
import pytest

from harness.sandbox import labels as L
from harness.sandbox.cleanup import (
    leaked_resources,
    run_resources,
    stale_runs,
    sweep,
    sweep_stale,
)
from harness.sandbox.cli import sweep_command
from harness.sandbox.container import Sandbox, SandboxSpec
from harness.sandbox.images.build import BuiltImage
from harness.sandbox.lease import (
    LEASE,
    LEASE_ID,
    Lease,
    Resource,
    create_lease_volume,
    engine_now,
    judge,
)
from harness.sandbox.lease_identity import Owner, current_owner, process_alive
from tests.sandbox.sandbox_lease_support import foreign_run, other_host
from tests.support.suite import wait_for

pytestmark = pytest.mark.docker

EMPTY: dict[str, list[str]] = {"containers": [], "networks": [], "volumes": []}


def test_another_hosts_live_run_survives_and_its_expired_run_is_swept(
    docker_client: docker.DockerClient, base_image: BuiltImage, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    prefix = f"hxt-lease-{secrets.token_hex(3)}-"
    live, dead = f"{prefix}live", f"{prefix}expired"
    nowhere = tmp_path / "not-on-this-host" / "run"  # never created: proves nothing
    try:
        live_names = foreign_run(docker_client, base_image, live, nowhere, other_host(), 600)
        foreign_run(docker_client, base_image, dead, nowhere, other_host(), 0)
        assert not nowhere.exists()
        verdicts = stale_runs(docker_client, run_id_prefix=prefix)
        assert not verdicts[live].stale and "lease of elsewhere valid" in verdicts[live].reason
        assert verdicts[dead].stale and "expired" in verdicts[dead].reason
        assert sweep_stale(docker_client, run_id_prefix=prefix) == [dead]
        assert leaked_resources(docker_client, run_id_prefix=dead) == EMPTY
        left = leaked_resources(docker_client, run_id_prefix=live)
        assert sorted(n.split(" ")[0] for names in left.values() for n in names) == sorted(
            live_names)
        # `harness sweep --list` says why; `harness sweep --all-stale` applies the same rule
        assert sweep_command(["--list", "--prefix", prefix]) == 0
        assert f"run\t{live}\talive: lease of elsewhere valid" in capsys.readouterr().out
        assert sweep_command(["--all-stale", "--prefix", prefix]) == 0
        assert len(leaked_resources(docker_client, run_id_prefix=live)["containers"]) == 1
    finally:
        sweep(live, client=docker_client)
        sweep(dead, client=docker_client)


def _own_run_then_exit(image_id: str, run_id: str, root: str) -> None:
    """A run of this host whose owner dies: a sandbox and a fresh lease, then exit."""
    from harness.sandbox.client import get_client

    client = get_client()
    Lease(run_id, Path(root), ttl_s=600, client=client).renew()  # fresh: expires in 10 min
    Sandbox.create(SandboxSpec(image=image_id, run_id=run_id, instance_id="a",
                               run_root=Path(root)), client=client)


def test_run_of_this_host_whose_pid_is_dead_is_swept_despite_a_fresh_lease(
    docker_client: docker.DockerClient, base_image: BuiltImage, tmp_path: Path
) -> None:
    prefix = f"hxt-deadpid-{secrets.token_hex(3)}-"
    run_id, root = f"{prefix}r", tmp_path / "dead"
    root.mkdir()
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_own_run_then_exit, args=(base_image.image_id, run_id, str(root)))
    try:
        proc.start()
        proc.join(120)
        assert proc.exitcode == 0
        assert proc.pid is not None and not process_alive(proc.pid)
        found = leaked_resources(docker_client, run_id_prefix=run_id)
        assert len(found["containers"]) == 1 and len(found["volumes"]) == 1
        verdict = stale_runs(docker_client, run_id_prefix=prefix)[run_id]
        assert verdict.stale and "gone" in verdict.reason
        assert root.exists(), "the run root is still here: only the dead pid decides"
        assert sweep_stale(docker_client, run_id_prefix=prefix) == [run_id]
        assert leaked_resources(docker_client, run_id_prefix=run_id) == EMPTY
    finally:
        sweep(run_id, client=docker_client)


def test_live_run_of_this_host_survives_although_its_root_is_gone(
    docker_client: docker.DockerClient, base_image: BuiltImage, tmp_path: Path
) -> None:
    prefix = f"hxt-alive-{secrets.token_hex(3)}-"
    run_id, root = f"{prefix}r", tmp_path / "gone"
    lease = Lease(run_id, root, ttl_s=600, client=docker_client)
    try:
        lease.acquire()
        sb = Sandbox.create(SandboxSpec(image=base_image.image_id, run_id=run_id,
                                        instance_id="x", run_root=root), client=docker_client)
        assert not root.exists()
        verdict = stale_runs(docker_client, run_id_prefix=prefix)[run_id]
        assert not verdict.stale and "alive on this host" in verdict.reason
        assert sweep_stale(docker_client, run_id_prefix=prefix) == []
        assert sb.is_running()
    finally:
        lease.release()
        sweep(run_id, client=docker_client)


def test_lease_renewal_replaces_the_volume_and_release_removes_it(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    run_id = f"hxt-renew-{secrets.token_hex(3)}"
    lease = Lease(run_id, tmp_path, ttl_s=600, client=docker_client)

    def volumes() -> list[dict]:
        found = docker_client.api.volumes(filters={"label": [f"{LEASE_ID}={lease.lease_id}"]})
        return list(found.get("Volumes") or [])

    try:
        first = lease.renew()
        second = lease.renew()
        assert first != second and [v["Name"] for v in volumes()] == [second]
        labels = volumes()[0]["Labels"]
        me = current_owner()
        assert labels[LEASE] == "1" and labels[L.RUN] == run_id
        assert labels["harness.host"] == me.host and labels["harness.pid"] == str(me.pid)
        lease.release()
        assert volumes() == []
    finally:
        sweep(run_id, client=docker_client)


def test_kept_run_is_never_stale_even_when_its_owner_is_gone(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    prefix = f"hxt-keep-{secrets.token_hex(3)}-"
    run_id = f"{prefix}r"
    try:
        create_lease_volume(docker_client.api, run_id, tmp_path / "x", lease_id="k", ttl_s=0,
                            keep=True, owner=other_host().labels())
        assert sweep_stale(docker_client, run_id_prefix=prefix) == []
        assert stale_runs(docker_client, run_id_prefix=prefix)[run_id].reason.startswith("kept")
    finally:
        sweep(run_id, client=docker_client)
    assert leaked_resources(docker_client, run_id_prefix=run_id) == EMPTY


def test_resources_without_owner_labels_are_judged_by_ttl(
    docker_client: docker.DockerClient, base_image: BuiltImage, tmp_path: Path
) -> None:
    """Older versions labelled no owner and made no lease: left alone until the TTL ends."""
    prefix = f"hxt-legacy-{secrets.token_hex(3)}-"
    fresh, expired = f"{prefix}fresh", f"{prefix}expired"
    old_style = {L.INSTANCE: "i", L.WORKER: "main", L.RUN_ROOT: str(tmp_path)}
    try:
        for run_id, ttl in ((fresh, "600"), (expired, "0")):
            docker_client.containers.create(base_image.image_id, ["sleep", "600"],
                                            network_mode="none",
                                            labels={**old_style, L.RUN: run_id, L.TTL: ttl})
        verdicts = stale_runs(docker_client, run_id_prefix=prefix)
        assert not verdicts[fresh].stale and verdicts[expired].stale
        assert sweep_stale(docker_client, run_id_prefix=prefix) == [expired]
        assert len(leaked_resources(docker_client, run_id_prefix=fresh)["containers"]) == 1
    finally:
        sweep(fresh, client=docker_client)
        sweep(expired, client=docker_client)


@pytest.mark.parametrize(
    ("case", "stale"),
    [("foreign-valid", False), ("foreign-expired", True), ("foreign-no-lease", False),
     ("local-dead", True), ("local-alive", False)],
)
def test_judge_rule(case: str, stale: bool, docker_client: docker.DockerClient) -> None:
    """The rule on its own (no resources created): the engine clock, real pids."""
    now = engine_now(docker_client.api)
    me = current_owner()
    dead = Owner(me.host, me.hostname, me.boot, me.pidns, pid=me.pid, start="0")  # pid reused
    owner = {"foreign-valid": other_host(), "foreign-expired": other_host(),
             "foreign-no-lease": other_host(), "local-dead": dead, "local-alive": me}[case]
    box = Resource("containers", "c", {**owner.labels(), L.TTL: "600"}, now - 5)
    lease = Resource("volumes", "l", {**owner.labels(), LEASE: "1",
                                      "harness.lease.ttl_s": "60"},
                     now - (600 if case == "foreign-expired" else 5))
    items = [box] if case == "foreign-no-lease" else [box, lease]
    assert judge(items, me, now).stale is stale


def test_heartbeat_keeps_a_live_run_valid_for_another_host_past_its_ttl(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    """Seen from another host (its pid cannot be checked), only the renewals keep it alive."""
    run_id = f"hxt-beat-{secrets.token_hex(3)}"
    lease = Lease(run_id, tmp_path, ttl_s=3, client=docker_client)
    elsewhere = other_host()
    try:
        lease.acquire()
        first = engine_now(docker_client.api)
        while engine_now(docker_client.api) < first + 7:  # more than twice the TTL
            wait_for(lambda: lease.renewals >= 2, timeout=30)
            items = run_resources(docker_client.api)[run_id]
            verdict = judge(items, elsewhere, engine_now(docker_client.api))
            assert not verdict.stale, verdict.reason
            assert all(r.is_lease for r in items) and len(items) <= 2  # old one going
            time.sleep(0.5)
        lease.stop()
        wait_for(lambda: judge(run_resources(docker_client.api)[run_id], elsewhere,
                               engine_now(docker_client.api)).stale, timeout=30)
    finally:
        lease.release()
        sweep(run_id, client=docker_client)
