"""Admission by the engines' real capacity (issue 27 point 4).

Without Docker: sizes, an instance's needs, the capacity an engine's resources allow (the
configured one is a maximum), memory pressure, and the shared reading with its events.
With Docker: the probe reads a test host's engine (its CPUs pinned with ``taskset``, so
``/info`` ``NCPU`` is a real limit; memory and disk as the host has them); a run over the
local engine and that host places instances in proportion to what each admits; and an
engine under memory pressure (a test double of the reading, loaded into the run's
processes only) gets no new instance until it recovers, both recorded as placement events.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from harness.sandbox import engine_capacity as ec
from harness.sandbox.engine_capacity import (
    EngineResources,
    GiB,
    InstanceNeeds,
    admitted_capacity,
    engine_pressure,
    memory_pressure,
    parse_needs,
    parse_size,
    read_events,
)
from harness.sandbox.engines import EngineError, instance_needs, load_engines_file
from tests.support.suite import Run, Suite, finish, wait_for
from tests.support.test_hosts import TestHost, leftovers, start_host

LOCAL = "local"


# ---------------------------------------------------------------------------- no Docker


def test_sizes_and_an_instances_needs() -> None:
    assert parse_size("16g") == 16 * GiB and parse_size("512M") == 512 << 20
    assert parse_size("1.5GiB") == int(1.5 * GiB) and parse_size("2048") == 2048
    with pytest.raises(ValueError, match="not a size"):
        parse_size("lots")
    needs = parse_needs("cpus=4, memory=16g,disk=40g")
    assert (needs.cpus, needs.memory, needs.disk) == (4.0, 16 * GiB, 40 * GiB)
    assert parse_needs("memory=2g") == InstanceNeeds(memory=2 * GiB)  # the rest by default
    for bad in ("gpus=1", "cpus", "memory=lots", "cpus=-1"):
        with pytest.raises(ValueError):
            parse_needs(bad)


def test_the_engines_file_gives_the_instance_size_and_checks_certificates(
    tmp_path: Path,
) -> None:
    certs = tmp_path / "certs"
    certs.mkdir()
    path = tmp_path / "engines.toml"
    path.write_text(
        '[instance]\ncpus = 2\nmemory = "8g"\n\n[[engines]]\nurl = "tcp://h:2376"\n'
        'cert_path = "certs"\n'
    )
    with pytest.raises(EngineError, match=r"cert_path .*certs lacks ca\.pem, cert\.pem, key\.pem"):
        load_engines_file(path)
    for name in ("ca.pem", "cert.pem", "key.pem"):
        (certs / name).write_text("x")
    (spec,) = load_engines_file(path)
    assert spec.cert_path == str(certs.resolve())  # relative to the file
    assert instance_needs(str(path), None) == InstanceNeeds(cpus=2, memory=8 * GiB)
    assert instance_needs(str(path), "cpus=1") == InstanceNeeds(cpus=1)  # the option wins
    with pytest.raises(EngineError, match="--instance-resources"):
        instance_needs(None, "cpus=x")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"engines": [{"url": "ssh://h", "cert_path": str(certs)}]}))
    with pytest.raises(EngineError, match="cert_path is for tcp:// engines"):
        load_engines_file(bad)


def res(**kw: float | None) -> EngineResources:
    base = {"ncpu": 8, "mem_total": 64 * GiB, "mem_available": 60 * GiB, "disk_free": 500 * GiB}
    return EngineResources.model_validate({**base, **kw})


def test_capacity_is_the_least_the_resources_allow_at_most_the_configured() -> None:
    needs = InstanceNeeds(cpus=4, memory=16 * GiB, disk=40 * GiB)
    assert admitted_capacity(8, res(), needs) == (2, {"cpus": 2, "memory": 3})
    assert admitted_capacity(1, res(), needs) == (1, None)  # the configured maximum binds
    # memory: (free - 5 % of total kept free) / per instance
    assert admitted_capacity(8, res(ncpu=64, mem_available=20 * GiB), needs) == (1, {"memory": 1})
    assert admitted_capacity(8, res(ncpu=64, disk_free=60 * GiB), needs) == (
        1,
        {"memory": 3, "disk": 1},
    )
    assert admitted_capacity(8, res(mem_available=10 * GiB), needs)[0] == 0
    # unknown fields (a probe that could not run) do not limit; total memory stands in
    assert admitted_capacity(8, res(ncpu=64, mem_available=None, disk_free=None), needs) == (
        3,
        {"memory": 3},
    )
    assert admitted_capacity(4, res(ncpu=2), InstanceNeeds(cpus=0.5)) == (4, None)


def test_memory_pressure_is_no_room_for_one_more_instance_or_stalls() -> None:
    needs = InstanceNeeds(memory=4 * GiB)
    assert memory_pressure(res(), needs) is None
    why = memory_pressure(res(mem_available=5 * GiB), needs)  # 4 GiB + 3.2 GiB kept free
    assert why is not None and "5.0 GiB free" in why
    assert "PSI" in (memory_pressure(res(psi_full_avg10=25.0), needs) or "")
    assert memory_pressure(res(mem_available=None), needs) is None


def test_the_shared_reading_records_pressure_and_recovery_once(tmp_path: Path) -> None:
    needs = InstanceNeeds(memory=1 * GiB)
    readings = iter([res(mem_available=GiB // 2), res(mem_available=GiB // 2), res(), res()])
    calls: list[int] = []

    def measure() -> EngineResources:
        calls.append(1)
        return next(readings)

    assert engine_pressure(tmp_path, 3, needs, measure, refresh_s=60) is not None
    assert engine_pressure(tmp_path, 3, needs, measure, refresh_s=60) is not None
    assert len(calls) == 1  # fresh: the shared reading, no new probe
    assert engine_pressure(tmp_path, 3, needs, measure, refresh_s=0) is not None
    assert engine_pressure(tmp_path, 3, needs, measure, refresh_s=0) is None
    assert engine_pressure(tmp_path, 3, needs, measure, refresh_s=0) is None
    assert [(e.engine, e.event) for e in read_events(tmp_path)] == [
        (3, "memory_pressure"),
        (3, "recovered"),
    ]

    def broken() -> EngineResources:
        calls.append(1)
        raise OSError("engine gone")

    calls.clear()
    assert engine_pressure(tmp_path, 3, needs, broken, refresh_s=0) is None  # keeps the last
    assert len(read_events(tmp_path)) == 2
    # ... until a reading is due again (not on every poll of a placement), in any process
    ec._seen.clear()
    assert engine_pressure(tmp_path, 3, needs, broken, refresh_s=60) is None
    assert len(calls) == 1


# ---------------------------------------------------------------------------- Docker


@pytest.fixture(scope="module")
def one_cpu_host() -> Iterator[TestHost]:
    """A test host whose dockerd runs on CPU 0 only (``NCPU`` 1), reached over TLS."""
    host = start_host(tls=True, cpus="0")
    try:
        yield host
    finally:
        host.close()
        left = leftovers(host)
        assert not left, left


def engines_json(path: Path, host: TestHost, local_max: int, host_max: int) -> Path:
    path.write_text(
        json.dumps(
            {
                "engines": [
                    {"url": LOCAL, "capacity": local_max},
                    {
                        "url": host.tls_url,
                        "capacity": host_max,
                        "cert_path": str(host.client_certs),
                    },
                ]
            }
        )
    )
    return path


@pytest.mark.docker
def test_the_probe_reads_an_engines_cpus_memory_and_disk(one_cpu_host: TestHost) -> None:
    from harness.sandbox.engines import EngineSpec, client_for

    run_id = f"probe-{uuid.uuid4().hex[:8]}"
    client = client_for(
        EngineSpec(url=one_cpu_host.tls_url, cert_path=str(one_cpu_host.client_certs))
    )
    try:
        found = ec.read_resources(
            client, one_cpu_host.tls_url, {"harness.run": run_id, "harness.ttl_s": "60"}, run_id
        )
        assert found.probe_error is None, found
        assert found.ncpu == 1  # taskset -c 0: the engine's own count
        meminfo = dict(
            line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines()
        )
        assert found.mem_total == int(meminfo["MemTotal"].split()[0]) * 1024
        assert 0 < (found.mem_available or 0) <= found.mem_total
        st = os.statvfs(one_cpu_host.root / "data")  # the engine's data root
        assert abs((found.disk_free or 0) - st.f_bavail * st.f_frsize) < 2 * GiB
        assert found.disk_total == st.f_blocks * st.f_frsize
        assert client.containers.list(all=True, filters={"label": f"harness.run={run_id}"}) == []
    finally:
        client.close()


@pytest.mark.slow
@pytest.mark.docker
def test_two_engines_take_load_in_proportion_to_their_capacity(
    tmp_path: Path, one_cpu_host: TestHost
) -> None:
    """One CPU per instance: the local engine admits min(4, its CPUs), the test host 1 (its
    dockerd sees one CPU); nine equal instances on three workers split in that proportion."""
    local_cpus = docker.from_env().info()["NCPU"]
    expect = {LOCAL: min(4, local_cpus), one_cpu_host.tls_url: 1}
    suite = Suite(tmp_path)
    suite.tasks([{"id": "s", "work": "sleep", "seconds": 1.0, "count": 9}])
    workers = sum(expect.values())
    run = suite.run(
        "-n",
        str(workers),
        "--instance-resources",
        "cpus=1,memory=256m,disk=1g",
        "--engines",
        str(engines_json(tmp_path / "e.json", one_cpu_host, 4, 4)),
    )
    assert run.rc == 0, run.out
    records = {e["url"]: e for e in run.manifest["extra"]["engines"]}
    for url, capacity in expect.items():
        rec = records[url]
        assert rec["max_capacity"] == 4 and rec["capacity"] == capacity, rec
        assert rec["resources"]["ncpu"] == (local_cpus if url == LOCAL else 1)
        assert rec["instance"] == {"cpus": 1.0, "memory": 256 << 20, "disk": 1 << 30}
    assert records[one_cpu_host.tls_url]["limited_by"] == {"cpus": 1}
    placed = Counter(r["details"]["engine"]["url"] for r in run.latest.values())
    share = {url: 9 * cap / workers for url, cap in expect.items()}
    for url, want in share.items():
        assert abs(placed[url] - want) <= 1, (placed, share)


PRESSURE = """
import os
from harness.sandbox import engine_capacity as ec

ec.REFRESH_S = 0.3  # re-read often: the test waits for the recovery
_real = ec.read_resources


def read_resources(client, url, labels, name):
    found = _real(client, url, labels, name)
    if url == {url!r} and os.environ.get("PYTEST_XDIST_WORKER") and os.path.exists({flag!r}):
        found = found.model_copy(update={{"mem_available": 0}})  # no room while the flag is
        open({flag!r} + ".seen", "a").close()  # a worker saw the pressure
    return found


ec.read_resources = read_resources


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # A worker measures at each placement: never the admission's reading, which the
        # controller (not faked) shared moments before a worker may place its first instance.
        ec.REFRESH_S = 0.0
"""


@pytest.mark.slow
@pytest.mark.docker
def test_an_engine_under_memory_pressure_gets_nothing_until_it_recovers(
    tmp_path: Path, one_cpu_host: TestHost
) -> None:
    flag = tmp_path / "pressure"
    flag.touch()
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "fake_pressure.py").write_text(
        PRESSURE.format(url=one_cpu_host.tls_url, flag=str(flag))
    )
    suite = Suite(
        tmp_path, {"PYTHONPATH": os.pathsep.join([str(plugins), os.environ.get("PYTHONPATH", "")])}
    )
    suite.tasks([{"id": "p", "work": "sleep", "seconds": 1.0, "count": 5}])
    proc, root = suite.start(
        "-n",
        "2",
        "-p",
        "fake_pressure",
        "--engines",
        str(engines_json(tmp_path / "e.json", one_cpu_host, 1, 1)),
    )
    executions = root / "selftest_executions.log"
    # Lifted once a worker has seen the pressure (on a loaded machine the first two instances
    # may run on the other engine before any worker asks this one) and two have run.
    seen = Path(f"{flag}.seen")
    wait_for(
        lambda: seen.exists()
        and executions.exists()
        and len(executions.read_text().splitlines()) >= 2,
        timeout=120,
    )
    lifted = time.time()
    flag.unlink()
    out = finish(proc, timeout=180)
    run = Run(proc.returncode or 0, out, root)
    assert proc.returncode == 0, out
    (rec,) = [e for e in run.manifest["extra"]["engines"] if e["url"] == one_cpu_host.tls_url]
    assert rec["capacity"] == 1 and rec["events"], rec
    events = [(e["event"], e["at_unix"]) for e in rec["events"]]
    assert [e for e, _ in events] == ["memory_pressure", "recovered"], events
    assert events[1][1] >= lifted
    assert rec["events"][0]["mem_available"] == 0
    started = {
        line.split()[0]: float(line.split()[2]) for line in executions.read_text().splitlines()
    }
    on_host = [
        k for k, r in run.latest.items() if r["details"]["engine"]["url"] == one_cpu_host.tls_url
    ]
    assert on_host, run.latest  # it took instances once it recovered
    assert all(started[k] >= events[1][1] - 0.5 for k in on_host), (started, events)
    assert all(r["resolved"] for r in run.latest.values())
