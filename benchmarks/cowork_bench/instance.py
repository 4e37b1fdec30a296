"""Run one Cowork instance end to end on Docker (network, sidecar, agent, eval, teardown).

``run_instance`` is what the benchmark's test body calls; tests drive it directly too.
Every container and the network carry ``labels``; teardown removes them by those labels and
lists again to prove nothing is left.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.cowork_bench import docker_ops
from benchmarks.cowork_bench import models as m
from benchmarks.cowork_bench.eval_once import CheckerRunner, EvalOutcome, evaluate_once
from benchmarks.cowork_bench.images import ensure_image
from benchmarks.cowork_bench.phases import (
    AgentStep,
    InstanceEnv,
    container_checker,
    run_agent_phase,
)
from benchmarks.cowork_bench.sidecar import PgSidecar, start_postgres
from benchmarks.cowork_bench.tasks import CoworkTask
from harness.errors import InfraError
from harness.fsutil import atomic_write_json

from .eval_once import now_iso


@dataclass
class InstanceResult:
    instance_id: str
    summary: m.AgentSummary | None
    eval: EvalOutcome | None
    infra: m.InfraRecord | None
    timings: dict[str, float] = field(default_factory=dict)
    cleanup: dict[str, object] = field(default_factory=dict)


def run_instance(
    task: CoworkTask,
    bench_root: Path,
    inst_dir: Path,
    agent: AgentStep,
    agent_name: str,
    *,
    ident: docker_ops.RunIdentity,
    seed_path: Path | None = None,
    sidecar: PgSidecar | None = None,
    checker: CheckerRunner | None = None,
    agent_timeout_sec: float = 1800,
) -> InstanceResult:
    """Sidecar (unless one is given, with its network), agent phase, eval phase, teardown.

    ``seed_path`` defaults to ``<bench_root>/db/init.sql.gz``. A given ``sidecar`` is reused
    and left running (the caller owns it); otherwise everything this instance created (by
    its run and instance labels) is removed and the listing proves it.
    """
    inst_dir = Path(inst_dir)
    inst_dir.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    own = sidecar is None
    result = InstanceResult(task.instance_id, None, None, None, timings)
    try:
        runtime = ensure_image("runtime").image_id
        if sidecar is None:
            t0 = time.monotonic()
            net = docker_ops.create_network(ident, task.instance_id)
            seed = seed_path or Path(bench_root) / "db" / "init.sql.gz"
            sidecar = start_postgres(net, ident, task.instance_id, seed)
            timings.update(sidecar.timings)
            timings["sidecar_total_s"] = time.monotonic() - t0
        env = InstanceEnv(task, Path(bench_root), inst_dir, sidecar.network, sidecar, ident,
                          runtime, timings)  # fmt: skip
        t1 = time.monotonic()
        result.summary = run_agent_phase(env, agent, agent_name, timeout_sec=agent_timeout_sec)
        timings["agent_phase_s"] = time.monotonic() - t1
        if not result.summary.infra_failed:
            t2 = time.monotonic()
            result.eval = evaluate_once(inst_dir, Path(bench_root), task.instance_id,
                                        checker or container_checker(env))  # fmt: skip
            timings["eval_s"] = time.monotonic() - t2
    except InfraError as exc:
        record = m.InfraRecord(instance_id=task.instance_id, reason_code=exc.reason_code,
                               stage="instance", message=str(exc)[:2000], at=now_iso())  # fmt: skip
        atomic_write_json(inst_dir / m.INFRA_RECORD, record)
        result.infra = record
    finally:
        if own:
            result.cleanup = docker_ops.remove_labelled(ident.labels(task.instance_id))
    return result
