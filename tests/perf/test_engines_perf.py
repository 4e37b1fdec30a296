"""Throughput of one run over 2 Docker engines against 1, on the same workload (issue 27).

    HARNESS_PERF_GOALS=warn pytest tests/perf/test_engines_perf.py -s

The workload is the ProgramBench fixture tasks (``--pb-fixtures``, 3 tasks) with
``--attempts 2`` (6 instances), ``-n 2`` and a latency-bound agent: ``--agent command
--agent-command "sleep S"`` (``ENGINES_PERF_SLEEP_S``, default 15). A model-driven agent
spends its time waiting on the model, not on the engine's CPUs, so this is the case where
more engines should mean proportionally more throughput; each instance still does all of its
real work around the agent (sandbox, preflight, submission, the official ``programbench
eval`` on the instance's engine).

The two timed runs differ only in their engines file: the system engine alone (``local``,
capacity 1), then the system engine and a second ``dockerd`` started here (capacity 1 each,
:mod:`tests.sandbox.engines.engines_support`). The figure is the ratio of their wall clocks,
t(1 engine) / t(2 engines), goal >= 1.8. Both engines share this machine's CPUs, so the
CPU-bound parts (eval, container start) do not scale as they would on two machines.

Before timing, the fixture image is built on the system engine and moved to the second one
(``docker save | docker load`` through the harness's own transfer, timed and printed apart:
a one-off cost per engine and image), then one untimed run on the second engine warms it
(its probe image, its first containers), so the ratio measures placement, not the copy.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import docker
import pytest

from benchmarks.programbench.fixture import ensure_fixture
from harness.sandbox.images.transfer import transfer
from tests.sandbox.engines.engines_support import (
    Engine,
    assert_no_leaks,
    engines_file,
    second_engine,
)
from tests.support.suite import Run, run_pytest

pytestmark = pytest.mark.docker
__all__ = ["second_engine"]  # the fixture (a fresh, empty second engine), used below

SYSTEM = "local"  # the engine of the environment (the system dockerd)
SLEEP_S = int(os.environ.get("ENGINES_PERF_SLEEP_S", "15"))
ATTEMPTS = 2
WORKERS = 2
TASKS = 3  # the offline fixture tasks
GOAL = 1.8


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def _run(root: Path, engines: Path, *args: str) -> tuple[Run, float]:
    started = time.perf_counter()
    run = run_pytest(
        "benchmarks/programbench",
        root,
        "--pb-fixtures",
        "--agent",
        "command",
        "--engines",
        str(engines),
        *args,
        timeout=900,
    )
    return run, time.perf_counter() - started


def _settled(run: Run, rows: int) -> set[int]:
    """The run ended with every instance settled; returns the engine indexes it used."""
    assert run.rc == 0, run.out
    assert len(run.latest) == rows, sorted(run.latest)
    assert not any(r["infra"] for r in run.latest.values()), run.out
    return {r["details"]["engine"]["index"] for r in run.latest.values()}


def test_two_engines_against_one_on_the_same_workload(
    tmp_path: Path, second_engine: Engine, perf_goal: Callable[..., bool]
) -> None:
    system, second = docker.from_env(), second_engine.client()
    image_id = ensure_fixture().image_id  # built (once) on the system engine, untimed
    with tempfile.TemporaryDirectory(prefix="engines-perf-lock-") as locks:
        record = transfer(image_id, system, second, str(Path(locks) / "image.lock"))
    assert record["transferred"], record  # a fresh engine: the image was not there
    print(f"\none-off transfer of the fixture image to the second engine: {record['seconds']:.1f}s")

    warm = engines_file(tmp_path, [(second_engine.url, 1)], "warm.json")
    run, seconds = _run(tmp_path / "warm", warm, "-k", "calculator", "--agent-command", "true")
    assert _settled(run, 1) == {0}
    print(f"untimed warm-up run on the second engine: {seconds:.1f}s")

    agent = ("--agent-command", f"sleep {SLEEP_S}", "--attempts", str(ATTEMPTS), "-n", str(WORKERS))
    rows = TASKS * ATTEMPTS
    one = engines_file(tmp_path, [(SYSTEM, 1)], "one.json")
    run_one, t_one = _run(tmp_path / "one", one, *agent)
    load_one = _load()
    assert _settled(run_one, rows) == {0}
    two = engines_file(tmp_path, [(SYSTEM, 1), (second_engine.url, 1)], "two.json")
    run_two, t_two = _run(tmp_path / "two", two, *agent)
    load_two = _load()
    assert _settled(run_two, rows) == {0, 1}  # both engines took instances

    ratio = t_one / t_two
    print(
        f"{rows} instances (agent: sleep {SLEEP_S}), -n {WORKERS}: 1 engine {t_one:.1f}s "
        f"(load {load_one}), 2 engines {t_two:.1f}s (load {load_two}); "
        f"throughput 2 vs 1 engines: {ratio:.2f}x"
    )
    assert_no_leaks(second, tmp_path)
    assert_no_leaks(system, tmp_path)
    second.close()
    perf_goal("engines_2_vs_1_throughput", ratio, GOAL, op=">=")
