"""Many waiting agents on one machine (issue 48): 64 latency-bound instances at ``-n 32``.

Real agents spend most of their time waiting on a model. This benchmark plays that with the
selftest ``agent`` work and a command agent that waits 30 s in its Docker sandbox before it
answers (``sleep 30``), 64 instances at ``-n 32`` on this machine: the ideal makespan is the
total wait over the concurrency, 64 x 30 s / 32 = 60 s.

Figures (the whole ``pytest`` process, a fresh interpreter, as a user starts it):

* ``waiting_agents_makespan_vs_ideal``: the process's wall time over the ideal (goal 1.15,
  a yardstick), and beside it the instance phase (first start to last end, from the
  ledger) over the ideal (a yardstick too);
* ``waiting_agents_host_rss_mb_per_instance``: the harness side's resident memory (the
  controller, its 32 workers and everything they start on the host), at its peak while the
  agents wait, over the 32 concurrent instances (goal 80 MB, enforced);
* ``waiting_agents_harness_cores_while_waiting``: the harness tree's CPU per second while
  every slot waits (goal 0.5 cores, enforced);
* ``waiting_agents_engine_mb_per_container``: the engine's resident memory (dockerd,
  containerd and the shims) at its peak minus before the run, over the containers then
  running (a yardstick of 32 MB); its CPU-s over the run per container is printed.

The makespan goals are yardsticks (see ``tests/perf/goals.py``): recorded, compared with the
last landed run, and named when past their goal, but not failing CI: one pytest-xdist worker
process per concurrent instance, each paying its own start-up and its sandbox's creation
inside its slot, is the design being measured (``docs/development/perf.md`` says what
would meet them).
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import docker
import pytest

from harness.sandbox.labels import label_filters
from tests.perf.proctree import Sample, sample
from tests.support.suite import Run, Suite

INSTANCES = 64
WORKERS = 32
WAIT_S = 30
IDEAL_S = INSTANCES * WAIT_S / WORKERS
AGENT = f"sleep {WAIT_S}; echo 42 > /workspace/answer.txt"
MB = 1024 * 1024

pytestmark = pytest.mark.docker


class Sampler(threading.Thread):
    """Every second: the run's process tree, the engine's processes, and how many of the
    run's sandboxes are up."""

    def __init__(self, root_pid: int, run_id: str) -> None:
        super().__init__(daemon=True)
        self.root_pid = root_pid
        self.filters = {"label": label_filters(run_id)}
        self.samples: list[tuple[float, int, Sample]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        client = docker.from_env()
        try:
            while not self.stop.wait(1.0):
                up = len(client.api.containers(filters=self.filters))
                self.samples.append((time.monotonic(), up, sample(self.root_pid)))
        finally:
            client.close()


def waiting_cpu_cores(samples: list[tuple[float, int, Sample]]) -> float:
    """The tree's CPU per second of wall time over the samples where every slot waits."""
    full = [(t, s) for t, up, s in samples if up >= WORKERS]
    if len(full) < 3:
        return float("nan")
    (t0, s0), (t1, s1) = full[0], full[-1]
    return (s1.tree_cpu_s - s0.tree_cpu_s) / (t1 - t0)


def test_64_waiting_agents_at_n32(tmp_path: Path, perf_goal: Any) -> None:
    suite = Suite(tmp_path)
    suite.tasks([{"id": "wait", "work": "agent", "count": INSTANCES, "timeout": 600}])
    run_id = f"waiting-{int(time.time())}"
    root = tmp_path / "run"
    before = sample(1)
    cmd = suite.command(root, "-n", str(WORKERS), "--run-id", run_id, "--agent", "command",
                        "--agent-command", AGENT)
    t0 = time.monotonic()
    wall0 = time.time()
    proc = subprocess.Popen(cmd, cwd=suite.path, env=suite.env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    sampler = Sampler(proc.pid, run_id)
    sampler.start()
    out, _ = proc.communicate(timeout=600)
    makespan = time.monotonic() - t0
    wall1 = time.time()
    sampler.stop.set()
    sampler.join()
    after = sample(1)
    assert proc.returncode == 0, out[-3000:]
    run = Run(proc.returncode, out, root)
    rows = run.rows
    assert len(rows) == INSTANCES and all(r["resolved"] for r in rows), out[-3000:]
    starts = [r["ts_unix"] - r["duration_s"] for r in rows]
    phase = max(r["ts_unix"] for r in rows) - min(starts)
    durations = sorted(r["duration_s"] for r in rows)
    print(f"\nfirst instance started {min(starts) - wall0:.1f}s after the process; the last "
          f"ended {wall1 - max(r['ts_unix'] for r in rows):.1f}s before it ended; instance "
          f"durations {durations[0]:.1f}s to {durations[-1]:.1f}s, median "
          f"{durations[len(durations) // 2]:.1f}s (the wait is {WAIT_S}s)")

    waiting = [(up, s) for _, up, s in sampler.samples if up >= WORKERS]
    assert waiting, "the run never had every slot waiting at once"
    peak_up, peak = max(waiting, key=lambda pair: pair[1].tree_rss)
    rss_per_instance = peak.tree_rss / WORKERS / MB
    cores = waiting_cpu_cores(sampler.samples)
    engine_up, engine_peak = max(((up, s) for _, up, s in sampler.samples),
                                 key=lambda pair: pair[1].engine_rss)
    engine_mb = (engine_peak.engine_rss - before.engine_rss) / max(engine_up, 1) / MB
    engine_cpu = (after.engine_cpu_s - before.engine_cpu_s) / INSTANCES
    print(f"\n{INSTANCES} agents waiting {WAIT_S}s at -n {WORKERS}: makespan {makespan:.1f}s "
          f"(ideal {IDEAL_S:.0f}s, {makespan / IDEAL_S:.3f}x); instance phase {phase:.1f}s "
          f"({phase / IDEAL_S:.3f}x); harness RSS at peak {peak.tree_rss / MB:.0f} MB in "
          f"{len(peak.tree)} processes with {peak_up} sandboxes up ({rss_per_instance:.1f} MB "
          f"per concurrent instance); harness CPU while all wait {cores:.3f} cores; engine "
          f"{engine_mb:.1f} MB and {engine_cpu:.2f} CPU-s per container "
          f"({engine_peak.count('containerd-shim')} shims at its peak)")
    perf_goal("waiting_agents_instance_phase_vs_ideal", phase / IDEAL_S, 1.15, yardstick=True)
    perf_goal("waiting_agents_harness_cores_while_waiting", cores, 0.5, unit=" cores")
    perf_goal("waiting_agents_engine_mb_per_container", engine_mb, 32.0, unit=" MB",
              yardstick=True)
    perf_goal("waiting_agents_makespan_vs_ideal", makespan / IDEAL_S, 1.15, yardstick=True)
    perf_goal("waiting_agents_host_rss_mb_per_instance", rss_per_instance, 80.0, unit=" MB")
