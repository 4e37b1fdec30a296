"""Cowork Bench through the runner: ``pytest benchmarks/cowork_bench`` sessions on the real
Docker engine (a warm fork of :mod:`tests.support.forkrun` each), and the one oracle run of
``cowork_mini`` a test session shares (:func:`shared_oracle_run`)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import docker
from filelock import FileLock
from pydantic import BaseModel

from tests.benchmarks.cowork.cowork_helpers import FIXTURE
from tests.support.suite import Run, run_pytest

TARGET = "benchmarks/cowork_bench"
# The environment of a probe whose lookup must fail: a name the engine's DNS (127.0.0.11)
# does not know is forwarded and, on an internal network, never answered, so glibc gives up
# only after its default 2 x 5 s; this gives up after one 2 s try (the same error). Never on
# a lookup that must succeed: a loaded engine or one lost packet would fail it.
FAST_DNS = {"RES_OPTIONS": "timeout:2 attempts:1"}
FILE_TASKS = ("excel-sales-summary", "sklad-reorder-excel")
DB_TASKS = ("gcal-standup-week", "email-weekly-report", "email-reply-invoice")

COUNTER_PLUGIN = '''
"""Counts real checker invocations: wraps the checker runner the instance uses (the
trial's steps, and run_instance for direct use)."""
import os

from benchmarks.cowork_bench import instance, phases, steps

_real = phases.container_checker


def _counting(env, *args, **kwargs):
    runner = _real(env, *args, **kwargs)

    def run(req):
        with open(os.environ["COWORK_CHECKER_LOG"], "a") as fh:
            fh.write(f"{req.instance_id} {os.getpid()}\\n")
        return runner(req)

    return run


instance.container_checker = steps.container_checker = _counting
'''


def cowork(root: Path, *args: str, env: dict[str, str] | None = None) -> Run:
    # --cowork-allow-dirty-bench: a local edit of the fixture must not block these runs (the gate
    # itself is tested on a checkout of its own, tests/benchmarks/cowork/test_cowork_runs.py).
    return run_pytest(TARGET, root, "--cowork-root", str(FIXTURE), "--cowork-allow-dirty-bench",
                      *args, env=env, timeout=600)  # fmt: skip


def labelled(run_id: str) -> list[str]:
    client = docker.from_env()
    flt = {"label": f"harness.run={run_id}"}
    return [c.name for c in client.containers.list(all=True, filters=flt)] + [
        n.name for n in client.networks.list(filters=flt)
    ]


def counter_env(tmp: Path, log: Path) -> dict[str, str]:
    plugin_dir = tmp / "plugins"
    plugin_dir.mkdir(parents=True, exist_ok=True)
    (plugin_dir / "cowork_checker_counter.py").write_text(COUNTER_PLUGIN)
    path = os.pathsep.join(p for p in (str(plugin_dir), os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": path, "COWORK_CHECKER_LOG": str(log)}


def invocations(log: Path) -> list[str]:
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


class OracleRunRecord(BaseModel):
    """``cowork_oracle_run.json``: what the session's oracle run gave, for every worker."""

    rc: int
    out: str
    root: str
    calls: list[str]
    elapsed: float


def shared_oracle_run(shared: Path) -> tuple[Run, list[str], float]:
    """The oracle agent over every ``cowork_mini`` task, ``-n 2``, with the real checkers
    counted: run once under ``shared`` (the session's base temp folder, which every xdist
    worker sees), by whichever worker asks first; the others wait for its record."""
    record = shared / "cowork_oracle_run.json"
    with FileLock(str(shared / "cowork_oracle_run.lock")):
        if not record.exists():
            tmp = shared / "cowork_oracle"
            tmp.mkdir()
            log = tmp / "checker_calls.log"
            t0 = time.monotonic()
            run = cowork(tmp / "run", "--agent", "oracle", "-n", "2", "-p",
                         "cowork_checker_counter", env=counter_env(tmp, log))  # fmt: skip
            data = OracleRunRecord(rc=run.rc, out=run.out, root=str(run.root),
                                   calls=invocations(log), elapsed=time.monotonic() - t0)  # fmt: skip
            record.write_text(data.model_dump_json())
    data = OracleRunRecord.model_validate(json.loads(record.read_text()))
    return Run(data.rc, data.out, Path(data.root)), data.calls, data.elapsed
