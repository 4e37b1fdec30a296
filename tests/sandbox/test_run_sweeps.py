"""The runner's sweeps on the real engine: the orphans of a SIGKILLed run are removed by
the next run's start-up sweep; another host's live run (fresh lease) survives it, an
expired one does not; a crashed worker's sandbox is removed at once; the session-end sweep
leaves nothing labelled with the run, its lease included."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from harness.sandbox.cleanup import leaked_resources, sweep
from harness.sandbox.images.build import BuiltImage
from harness.sandbox.lease_identity import host_id
from tests.sandbox.sandbox_lease_support import foreign_run, other_host
from tests.support.suite import Suite, finish, wait_for

pytestmark = pytest.mark.docker

LONG_AGENT = [{"id": "long", "work": "agent", "timeout": 300}]


def labelled(run_id: str) -> list[str]:
    """Names of the run's containers, from one listing (``containers.list`` inspects each one
    after listing, and fails when a finished instance's container is removed in between)."""
    listed = docker.from_env().api.containers(all=True, filters={"label": f"harness.run={run_id}"})
    return [str(c["Names"][0]).lstrip("/") for c in listed]


def run_id_of(root: Path) -> str:
    return str(json.loads((root / "run_manifest.json").read_text())["run_id"])


def test_orphans_of_a_sigkilled_run_are_swept_by_the_next_run(tmp_path: Path) -> None:
    suite = Suite(tmp_path)
    suite.tasks(LONG_AGENT)
    proc, root = suite.start("--agent", "command", "--agent-command", "sleep 300")
    wait_for(lambda: (root / "run_manifest.json").exists())
    run_id = run_id_of(root)
    wait_for(lambda: bool(labelled(run_id)), timeout=120)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert labelled(run_id), "a SIGKILLed run leaves its sandbox running"
    suite.tasks([{"id": "quick", "work": "succeed"}])
    after = suite.run()
    assert after.rc == 0, after.out
    assert labelled(run_id) == []


def test_crashed_worker_sandbox_is_swept_and_the_run_goes_on(tmp_path: Path) -> None:
    suite = Suite(tmp_path)
    suite.tasks([*LONG_AGENT, {"id": "other", "work": "sleep", "seconds": 1, "count": 3}])
    proc, root = suite.start("-n", "2", "--agent", "command", "--agent-command", "sleep 300")
    wait_for(lambda: (root / "run_manifest.json").exists())
    run_id = run_id_of(root)
    wait_for(lambda: bool(labelled(run_id)), timeout=120)
    container = docker.from_env().containers.get(labelled(run_id)[0])
    worker = container.labels["harness.worker"]
    pid = int((root / ".harness" / "workers" / f"{worker}.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    out = finish(proc, timeout=300)
    assert proc.returncode == 1, out
    rows = {json.loads(x)["instance_id"]: json.loads(x)
            for x in (root / "result_index.jsonl").read_text().splitlines()}
    assert rows["long"]["reason_code"] == "worker_crashed"
    assert all(rows[f"other-{i:04d}"]["status"] == "completed" for i in range(3))
    manifest = json.loads((root / "run_manifest.json").read_text())
    crashes = manifest["extra"]["sweeps"]["worker_crashes"]
    assert crashes[0]["worker"] == worker and container.name in crashes[0]["removed"]
    assert manifest["extra"]["sweeps"]["final"] == {"removed": []}
    assert labelled(run_id) == []


def test_keep_sandboxes_prints_the_sweep_command(tmp_path: Path) -> None:
    suite = Suite(tmp_path)
    suite.tasks([{"id": "kept", "work": "agent"}])
    run = suite.run("--agent", "oracle", "--keep-sandboxes")
    assert run.rc == 0, run.out
    run_id = run_id_of(run.root)
    assert len(labelled(run_id)) == 1
    run.result.stdout.fnmatch_lines([
        f"*--keep-sandboxes: remove this run's sandboxes with: harness sweep --run {run_id}"])
    later = suite.run("--agent", "nop")  # a later run's start-up sweep leaves it alone
    assert later.rc == 0, later.out
    assert len(labelled(run_id)) == 1
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "sweep", "--run", run_id],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert labelled(run_id) == []


def test_startup_sweep_spares_another_hosts_live_run_and_removes_an_expired_one(
    tmp_path: Path, docker_client: docker.DockerClient, base_image: BuiltImage
) -> None:
    prefix = f"hxt-host-{os.urandom(3).hex()}-"
    live, dead = f"{prefix}live", f"{prefix}expired"
    nowhere = tmp_path / "other-host" / "run"  # the other host's run root: not on this host
    try:
        live_names = foreign_run(docker_client, base_image, live, nowhere, other_host(), 600)
        foreign_run(docker_client, base_image, dead, nowhere, other_host(), 0)
        (tmp_path / "suite").mkdir()
        suite = Suite(tmp_path / "suite")
        suite.tasks([{"id": "quick", "work": "succeed"}])
        run = suite.run()
        assert run.rc == 0, run.out
        sweeps = run.manifest["extra"]["sweeps"]
        assert live not in sweeps["startup"]["stale_runs_swept"]
        left = leaked_resources(docker_client, run_id_prefix=live)
        assert sorted(n.split(" ")[0] for names in left.values() for n in names) == sorted(
            live_names)
        # swept by this run's start-up sweep (or a concurrent run's: same rule)
        assert leaked_resources(docker_client, run_id_prefix=dead) == {
            "containers": [], "networks": [], "volumes": []}
        assert sweeps["lease"]["host"] == host_id() and sweeps["lease"]["keep"] is False
        assert leaked_resources(docker_client, run_id_prefix=run_id_of(run.root))["volumes"] == []
    finally:
        sweep(live, client=docker_client)
        sweep(dead, client=docker_client)
