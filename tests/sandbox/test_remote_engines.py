"""Remote Docker engines for real (issue 27 point 1): one run over an ``ssh://`` engine and a
TLS ``tcp://`` engine, each on a test host of its own (a network namespace with its own
address, ``dockerd``, and ``sshd`` or a ``--tlsverify`` listener: :mod:`tests.support.test_hosts`).

The run places selftest sandbox instances on both, moves the base image to each
(``save | load`` through the tunnel and over TLS), settles; the run's lease lives on each
engine while it runs and is gone after; the custody proof asks each engine (a leftover on
either keeps it unsettled). Then one engine's ``dockerd`` is killed and the other's veth
cut mid-run: only their instances end ``engine_lost``, the local engine's finish; a resume,
with the cut host back, admits it again (sweeping the dead run's lease left there), records
the killed one unreachable and runs the lost instances on an engine that answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from harness.sandbox.cleanup import leaked_resources
from harness.sandbox.engines import EngineSpec
from tests.support.suite import Suite, wait_for
from tests.support.test_hosts import TestHost, leftovers, ssh_environment, start_host

pytestmark = [pytest.mark.docker, pytest.mark.slow]

LOCAL = "local"
SYSTEM_CAS = "/etc/ssl/certs/ca-certificates.crt"  # Debian's ca-certificates

# Loaded into the run's processes (-p): what each instance saw of its engine while it ran.
WITNESS = """
import json, os, subprocess
from harness.sandbox import placement
from harness.sandbox.client import get_client

def _docker_env():
    return {{k: v for k, v in os.environ.items() if k.startswith("DOCKER_")}}

AT_START = _docker_env()

def pytest_runtest_call(item):
    slot = placement.active()
    if slot is None:
        return
    client = get_client()
    try:
        leases = [v.name for v in client.volumes.list(filters={{"label": [
            "harness.lease=1", "harness.run=" + item.config.getoption("run_id")]}})]
        engine_id = client.info()["ID"]
    finally:
        client.close()
    cli = subprocess.run(["docker", "info", "--format", "{{{{.ID}}}}"], capture_output=True,
                         text=True, timeout=60, env=placement.instance_environment())
    with open({out!r}, "a") as f:
        f.write(json.dumps({{"url": slot.engine.url, "leases": leases, "engine_id": engine_id,
                            "cli_engine_id": cli.stdout.strip(), "cli_rc": cli.returncode,
                            "environ_unchanged": _docker_env() == AT_START}}) + "\\n")
"""

# Loaded into the run's processes (-p): the first instance placed on the ssh engine kills its
# dockerd, the first one placed on the TLS engine cuts its veth (each once).
FAULTS = """
import os, signal, subprocess
from harness.sandbox import placement

def _once(name):
    try:
        os.close(os.open(os.path.join({marks!r}, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False

def pytest_runtest_call(item):
    slot = placement.active()
    if slot is None:
        return
    if slot.engine.url == {ssh_url!r} and _once("killed"):
        os.kill({pid}, signal.SIGKILL)
    if slot.engine.url == {tls_url!r} and _once("cut"):
        subprocess.run(["ip", "link", "set", {veth!r}, "down"], check=True)
"""


@pytest.fixture(scope="module")
def hosts() -> Iterator[tuple[TestHost, TestHost]]:
    """Two test hosts for the module: ``a`` reached over ssh, ``b`` over TLS. Closed (and
    proven gone) after the module, also when a test or a start failed."""
    started: list[TestHost] = []
    try:
        started.append(start_host(ssh=True))
        started.append(start_host(tls=True))
        yield started[0], started[1]
    finally:
        for host in started:
            host.close()
        left = [item for host in started for item in leftovers(host)]
        assert not left, left


def engines_file(path: Path, a: TestHost, b: TestHost, local: bool = False) -> Path:
    engines = [
        {"url": a.ssh_url, "capacity": 1},
        {"url": b.tls_url, "capacity": 1, "cert_path": str(b.client_certs)},
    ]
    if local:
        engines.insert(0, {"url": LOCAL, "capacity": 1})
    path.write_text(json.dumps({"engines": engines}))
    return path


def plugin(folder: Path, name: str, text: str) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(text)
    return {"PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}


def run_leftovers(client: docker.DockerClient, run_id: str, under: Path) -> dict[str, list[str]]:
    """The run's containers, networks and volumes (its leases too) left on one engine."""
    left = leaked_resources(client, run_root_under=under)
    left["leases"] = [
        v.name
        for v in client.volumes.list(
            filters={"label": ["harness.lease=1", f"harness.run={run_id}"]}
        )
    ]
    return {k: v for k, v in left.items() if v}


def test_a_run_over_an_ssh_and_a_tls_engine_settles_and_proves_both_clean(
    tmp_path: Path, hosts: tuple[TestHost, TestHost], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = hosts
    # The TLS engine verifies its clients: without the client certificate nothing answers.
    no_cert = subprocess.run(
        ["docker", "-H", b.tls_url, "--tls", "version"], capture_output=True, text=True, timeout=60
    )
    assert no_cert.returncode != 0, no_cert.stdout
    env = ssh_environment(tmp_path / "ssh", [a])
    # A CA bundle of the environment (set where a corporate CA is installed) must not
    # replace the TLS engine's own CA: requests would otherwise let it, on every request.
    env["REQUESTS_CA_BUNDLE"] = env["CURL_CA_BUNDLE"] = SYSTEM_CAS
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", SYSTEM_CAS)
    witness = tmp_path / "witness.jsonl"
    env.update(plugin(tmp_path / "plugins", "witness", WITNESS.format(out=str(witness))))
    suite = Suite(tmp_path, env)  # the ssh config, the plugin
    suite.tasks([{"id": "t", "work": "agent", "count": 2}])  # one on each engine
    run_id = f"remote-{uuid.uuid4().hex[:8]}"
    run = suite.run(
        "--agent",
        "oracle",
        "-n",
        "2",
        "--run-id",
        run_id,
        "--engines",
        str(engines_file(tmp_path / "engines.json", a, b)),
        "-p",
        "witness",
        timeout=600,
    )
    assert run.rc == 0, run.out
    rows = run.latest
    assert len(rows) == 2 and all(r["resolved"] for r in rows.values()), rows
    assert {r["details"]["engine"]["url"] for r in rows.values()} == {a.ssh_url, b.tls_url}
    records = {e["url"]: e for e in run.manifest["extra"]["engines"]}
    for host, url in ((a, a.ssh_url), (b, b.tls_url)):
        rec = records[url]
        assert rec["reachable"] and rec["server_version"], rec
        assert rec["lease"]["lease_id"] and rec["lease"]["last_error"] is None, rec
        # the image moved to the engine, tags and all
        client = host.client()
        tags = {t for img in client.images.list() for t in img.tags}
        assert any(t.startswith("harness/base:") for t in tags), tags
        assert run_leftovers(client, run_id, tmp_path) == {}  # leases released too
        client.close()
    via = records[a.ssh_url]["via"]  # the run's tunnel: closed, its folder gone
    assert via.startswith(f"unix://{tempfile.gettempdir()}/harness-ssh-")
    assert not Path(via[7:]).parent.exists()
    final = run.manifest["extra"]["engine_final"]
    assert set(final) == {a.ssh_url, b.tls_url} and all("removed" in v for v in final.values())
    # While the instances ran: the run's lease on their engine; the docker CLI (what the
    # official tools use), given the instance's environment, reached the same engine through
    # the tunnel and over TLS; the process's own environment was never rewritten.
    seen = [json.loads(line) for line in witness.read_text().splitlines()]
    ids = {a.ssh_url: a.client().info()["ID"], b.tls_url: b.client().info()["ID"]}
    assert {s["url"] for s in seen} == {a.ssh_url, b.tls_url}
    for s in seen:
        assert len(s["leases"]) == 1, s
        assert s["engine_id"] == ids[s["url"]] == s["cli_engine_id"], s
        assert s["environ_unchanged"], s
    # The custody proof asks each engine (the ssh one through a tunnel of its own now).
    from harness.runner.budget_plugin import cleanup_unproven

    monkeypatch.setenv("PATH", env["PATH"])
    assert cleanup_unproven(run_id, run.root) is None
    clients = [a.client(), b.client()]
    nets = [
        c.networks.create(f"{run_id}-left", internal=True, labels={"harness.run": run_id})
        for c in clients
    ]
    try:
        why = cleanup_unproven(run_id, run.root)
        for url in (a.ssh_url, b.tls_url):
            assert why is not None and f"{run_id}-left (on {url})" in why, why
    finally:
        for net, client in zip(nets, clients, strict=True):
            net.remove()
            client.close()
    assert cleanup_unproven(run_id, run.root) is None


TUNNEL_HOLDER = """
import json, sys, time
from harness.sandbox.ssh_tunnel import SshTunnel

tunnel = SshTunnel.open(sys.argv[1])
print(json.dumps({"pid": tunnel.proc.pid, "folder": str(tunnel.folder)}), flush=True)
time.sleep(600)
"""


def test_a_killed_controllers_tunnel_ends_with_it_and_the_next_open_removes_its_folder(
    tmp_path: Path, hosts: tuple[TestHost, TestHost], monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL of the process that opened a tunnel ends its ssh (pdeathsig); the folder it
    leaves (socket, log) goes at the next tunnel's opening. Before the test that kills
    ``a``'s engine."""
    from harness.sandbox.lease_identity import process_alive
    from harness.sandbox.ssh_tunnel import SshTunnel

    a, _ = hosts
    env = {**os.environ, **ssh_environment(tmp_path / "ssh", [a])}
    holder = subprocess.Popen(
        [sys.executable, "-c", TUNNEL_HOLDER, a.ssh_url],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=Path(__file__).parents[2],
    )
    try:
        assert holder.stdout is not None
        opened = json.loads(holder.stdout.readline())
    finally:
        holder.kill()
        holder.wait()
    ssh, folder = opened["pid"], Path(opened["folder"])
    wait_for(lambda: not process_alive(ssh), timeout=10)
    assert (folder / "docker.sock").exists()  # left behind by the killed opener
    monkeypatch.setenv("PATH", env["PATH"])
    tunnel = SshTunnel.open(a.ssh_url)
    tunnel.close()
    assert not folder.exists() and not tunnel.folder.exists()


def test_losing_engines_mid_run_loses_only_their_instances_and_resume_replaces_them(
    tmp_path: Path, hosts: tuple[TestHost, TestHost]
) -> None:
    a, b = hosts
    env = ssh_environment(tmp_path / "ssh", [a])
    marks = tmp_path / "marks"
    marks.mkdir()
    env.update(
        plugin(
            tmp_path / "plugins",
            "faults",
            FAULTS.format(
                marks=str(marks),
                ssh_url=a.ssh_url,
                tls_url=b.tls_url,
                pid=a.dockerd_pid,
                veth=b.veth,
            ),
        )
    )
    suite = Suite(tmp_path, env)  # the ssh config, the plugin
    suite.tasks([{"id": "t", "work": "agent", "count": 4}])
    path = engines_file(tmp_path / "engines.json", a, b, local=True)
    try:
        first = suite.run(
            "--agent",
            "oracle",
            "-n",
            "3",
            "--engines",
            str(path),
            "-p",
            "faults",
            "--retry-infra",
            "0",
            timeout=600,
        )
        assert first.rc == 1, first.out
        assert sorted(os.listdir(marks)) == ["cut", "killed"]
        rows = first.latest
        lost = {k: r for k, r in rows.items() if r["reason_code"] == "engine_lost"}
        assert {r["details"]["engine"]["url"] for r in lost.values()} == {a.ssh_url, b.tls_url}
        assert len(lost) == 2 and all(r["infra"] for r in lost.values()), lost
        done = [r for r in rows.values() if r["reason_code"] != "engine_lost"]
        assert len(done) == 2 and all(r["resolved"] for r in done), done
        assert all(r["details"]["engine"]["url"] == LOCAL for r in done)
        extra = first.manifest["extra"]
        assert sorted(extra["engines_lost"]) == sorted([a.ssh_url, b.tls_url])
        assert all("error" in extra["engine_final"][u] for u in (a.ssh_url, b.tls_url))
        b.restore()  # the cut host is back; the killed one stays dead
        suite.extra_env.pop("PYTHONPATH")  # no faults this time
        again = suite.run(
            "--agent",
            "oracle",
            "-n",  # one worker: the local engine (listed first) takes both again, and
            "1",  # the admitted TLS engine needs no image moved to it here
            "--engines",
            str(path),
            "--resume-from",
            str(first.root),
            timeout=600,
        )
        assert again.rc == 0, again.out
        records = {e["url"]: e for e in again.manifest["extra"]["engines"]}
        assert records[a.ssh_url]["reachable"] is False, records[a.ssh_url]
        assert records[b.tls_url]["reachable"] is True
        # the dead run's lease left on the cut engine was swept as stale at admission
        assert first.manifest["run_id"] in records[b.tls_url]["lease"]["stale_runs_swept"]
        for key in lost:
            row = again.latest[key]
            assert row["resolved"] and row["details"]["engine"]["url"] == LOCAL, row
        client = b.client()
        assert run_leftovers(client, first.manifest["run_id"], tmp_path) == {}
        assert run_leftovers(client, again.manifest["run_id"], tmp_path) == {}
        client.close()
        assert not any(leaked_resources(docker.from_env(), run_root_under=tmp_path).values())
    finally:
        b.restore()


def test_an_ssh_engine_that_cannot_be_reached_is_unreachable_with_ssh_s_reason(
    hosts: tuple[TestHost, TestHost],
) -> None:
    """ssh in BatchMode: a host key not in known_hosts fails at once (no prompt), and so does
    a port where nothing listens; the record says why."""
    from harness.sandbox.engines import probe
    from harness.sandbox.ssh_tunnel import TunnelError, tunnel_client

    a, _ = hosts
    with pytest.raises(TunnelError, match="Host key verification failed"):
        tunnel_client(a.ssh_url)  # the test's ssh config is not on PATH here
    rec = probe(EngineSpec(url="ssh://nobody@127.0.0.1:1"), 0)
    assert rec.reachable is False and "Connection refused" in (rec.error or ""), rec
