"""Sandbox overhead against the raw Docker CLI, measured in one run.

    pytest tests/perf/test_sandbox_perf.py

* cycle: ``Sandbox.create`` + ``exec(["true"])`` + ``remove()`` (verified by listing)
  against

  - ``docker run --rm IMAGE true`` (the target's reference),
  - the same with the sandbox's settings (``--network none --init``): it runs no exec,
    so it is cheaper than any create+exec+remove by one runc exec (~35 ms here),
  - the CLI doing what the harness does: ``docker run -d ... sleep``, ``docker exec``,
    ``docker rm -f``,
  - the bare SDK calls (create, start, exec, remove): the harness's own overhead.

* exec: ``Sandbox.exec(["true"])`` against ``docker exec CID true``, and against the
  bare SDK ``exec_create`` + ``exec_start`` (no exit code, no timeout handling).

``test_report_ratios`` prints the medians and ratios and checks the targets: the
harness cycle at most 10 % over ``docker run --rm IMAGE true``, and its exec faster
than the CLI's. All cases run interleaved in one process on the same image, so
machine load affects them alike.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from harness.sandbox import Sandbox, SandboxSpec, base_recipe, ensure_image, get_client, run_lock
from harness.sandbox.cleanup import leaked_resources, sweep

ROUNDS_CYCLE = 30
ROUNDS_EXEC = 200
pytestmark = pytest.mark.docker
RUN_ID = "hxperf-sandbox"
MEDIANS: dict[str, float] = {}


@pytest.fixture(scope="module")
def client() -> docker.DockerClient:
    return get_client()


@pytest.fixture(scope="module")
def image(client: docker.DockerClient) -> str:
    return ensure_image(base_recipe(), client=client).image_id


@pytest.fixture(scope="module")
def docker_cli() -> str:
    cli = shutil.which("docker")
    assert cli, "the docker CLI is needed for the comparison"
    return cli


@pytest.fixture(scope="module")
def run_root(
    tmp_path_factory: pytest.TempPathFactory, client: docker.DockerClient
) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("perf-run")
    with run_lock(root).acquire(timeout=0):
        yield root
    sweep(RUN_ID, client=client)
    assert leaked_resources(client, run_id_prefix=RUN_ID)["containers"] == []


def _interleaved(rounds: int, **cases: Callable[[], object]) -> dict[str, float]:
    """Run the cases round-robin (after one warm-up each); return median seconds."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for fn in cases.values():
        fn()
    for _ in range(rounds):
        for name, fn in cases.items():
            started = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def _cli(argv: list[str]) -> None:
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_create_exec_remove_cycle(
    benchmark, client: docker.DockerClient, image: str, run_root: Path, docker_cli: str
) -> None:
    spec = SandboxSpec(image=image, run_id=RUN_ID, instance_id="cycle", run_root=run_root)

    def harness_cycle() -> None:
        with Sandbox.create(spec, client=client) as sb:
            assert sb.exec(["true"]).exit_code == 0

    def cli_equivalent() -> None:
        out = subprocess.run(
            [
                docker_cli,
                "run",
                "-d",
                "--network",
                "none",
                "--init",
                "--label",
                f"harness.run={RUN_ID}",
                image,
                "sleep",
                "600",
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        cid = out.stdout.strip()
        _cli([docker_cli, "exec", cid, "true"])
        _cli([docker_cli, "rm", "-f", cid])

    api = client.api

    def sdk_raw() -> None:
        cid = api.create_container(
            image,
            ["sleep", "600"],
            labels={"harness.run": RUN_ID},
            host_config=api.create_host_config(network_mode="none", init=True),
        )["Id"]
        api.start(cid)
        api.exec_start(api.exec_create(cid, ["true"])["Id"])
        api.remove_container(cid, force=True)

    medians = _interleaved(
        ROUNDS_CYCLE,
        harness=harness_cycle,
        cli_run=lambda: _cli([docker_cli, "run", "--rm", image, "true"]),
        cli_run_same_settings=lambda: _cli(
            [docker_cli, "run", "--rm", "--network", "none", "--init", image, "true"]
        ),
        cli_equivalent=cli_equivalent,
        sdk_raw=sdk_raw,
    )
    MEDIANS.update({f"cycle_{k}": v for k, v in medians.items()})
    benchmark.pedantic(harness_cycle, rounds=5, iterations=1)


def test_exec_round_trip(
    benchmark, client: docker.DockerClient, image: str, run_root: Path, docker_cli: str
) -> None:
    spec = SandboxSpec(image=image, run_id=RUN_ID, instance_id="exec", run_root=run_root)
    with Sandbox.create(spec, client=client) as sb:
        medians = _interleaved(
            ROUNDS_EXEC,
            harness=lambda: sb.exec(["true"]),
            cli_exec=lambda: _cli([docker_cli, "exec", sb.id, "true"]),
            sdk_raw=lambda: client.api.exec_start(client.api.exec_create(sb.id, ["true"])["Id"]),
        )
        MEDIANS.update({f"exec_{k}": v for k, v in medians.items()})
        benchmark.pedantic(lambda: sb.exec(["true"]), rounds=50, iterations=1)


def test_report_ratios(capsys: pytest.CaptureFixture[str], perf_goal: Callable[..., bool]) -> None:
    assert {"cycle_harness", "exec_harness"} <= MEDIANS.keys(), "run the whole module"
    cycle = MEDIANS["cycle_harness"] / MEDIANS["cycle_cli_run"]
    cycle_same = MEDIANS["cycle_harness"] / MEDIANS["cycle_cli_run_same_settings"]
    cycle_equiv = MEDIANS["cycle_harness"] / MEDIANS["cycle_cli_equivalent"]
    cycle_sdk = MEDIANS["cycle_harness"] / MEDIANS["cycle_sdk_raw"]
    exec_ratio = MEDIANS["exec_harness"] / MEDIANS["exec_cli_exec"]
    exec_sdk = MEDIANS["exec_harness"] / MEDIANS["exec_sdk_raw"]
    with capsys.disabled():
        print("\nsandbox perf (medians):")
        for name, value in sorted(MEDIANS.items()):
            print(f"  {name:32s} {value * 1000:8.1f} ms")
        for label, ratio in [
            ("cycle: harness / `docker run --rm IMAGE true`", cycle),
            ("cycle: harness / same with --network none --init", cycle_same),
            ("cycle: harness / CLI run -d + exec + rm -f", cycle_equiv),
            ("cycle: harness / bare SDK calls", cycle_sdk),
            ("exec:  harness / `docker exec CID true`", exec_ratio),
            ("exec:  harness / bare SDK exec (no exit code, no kill)", exec_sdk),
        ]:
            print(f"  {label:52s} {ratio:.2f}")
    perf_goal("sandbox_cycle_vs_docker_run", cycle, 1.10)
    perf_goal("sandbox_cycle_vs_cli_equivalent", cycle_equiv, 1.0, op="<")
    perf_goal("sandbox_exec_vs_docker_exec", exec_ratio, 1.0, op="<")
