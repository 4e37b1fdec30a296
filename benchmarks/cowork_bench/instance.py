"""Run one Cowork instance end to end on Docker (network, sidecar, agent, eval, teardown).

The runner's trial runs an instance's life from the steps of :mod:`.steps`, which use the
parts here (the sidecar, recovery, teardown, the agent server's task body, the agent's
seed). ``run_instance`` composes the same parts around a Cowork agent step (nop, oracle,
a script) for tests and tools that drive one instance without the runner.

Every container and the network carry the run and instance labels; teardown removes them
by those labels and lists again to prove nothing is left, also when the instance fails
(``--keep-sandboxes`` keeps the sidecar and network; the runner names the sweep command).

Eval at most once per attempt. An *attempt* is one agent phase; its eval claim and receipt
live in its instance folder. A resumed run re-runs only instances whose latest row is not
settled; when such an instance's folder in an ancestor run holds an attempt whose eval
finished (claim + receipt: the row was lost after scoring, e.g. a worker died or teardown
failed), that attempt is *recovered*: its folder is copied here and its eval replays the
receipt; neither the agent nor the checker runs again. Otherwise a fresh attempt runs.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from benchmarks.cowork_bench import BENCHMARK
from benchmarks.cowork_bench import models as m
from benchmarks.cowork_bench.classify import classify_instance
from benchmarks.cowork_bench.containers import Limits, RunIdentity
from benchmarks.cowork_bench.diagnostic import run_diagnostic
from benchmarks.cowork_bench.eval_once import (
    CheckerRequest,
    CheckerRun,
    CheckerRunner,
    EvalOutcome,
    evaluate_once,
    now_iso,
    read_claim,
)
from benchmarks.cowork_bench.images import ensure_image
from benchmarks.cowork_bench.phases import (
    AgentStep,
    InstanceEnv,
    container_checker,
    run_agent_phase,
)
from benchmarks.cowork_bench.seed import SEED_RECORD, SeedTar, agent_seed
from benchmarks.cowork_bench.sidecar import PgSidecar, start_postgres
from benchmarks.cowork_bench.tasks import CoworkTask, TaskDocs
from harness.api import (
    AgentSeed,
    CopyLimits,
    InfraError,
    InstanceContext,
    atomic_write_json,
    create_internal_network,
    phase_deadline,
    read_manifest,
    remove_labelled,
    run_roots,
)

TTL_MARGIN_S = 3600  # container life beyond the agent timeout (preprocess, eval, teardown)
INSTRUCTION_NAME = m.INSTRUCTION
RECOVERED_NAME = "recovered.json"
RECOVERABLE = ("passed", "failed", "agent_failed")
CHECKER_TAIL = 1500


@dataclass
class InstanceResult:
    instance_id: str
    summary: m.AgentSummary | None
    eval: EvalOutcome | None
    infra: m.InfraRecord | None
    timings: dict[str, float] = field(default_factory=dict)
    cleanup: dict[str, object] = field(default_factory=dict)
    diagnostic: m.DiagnosticRecord | None = None
    runtime_image: str | None = None  # image id the agent and eval containers ran
    pg_image: str | None = None  # image id of the PostgreSQL sidecar
    pg_seed_missing: str | None = None  # the dump that was not there (--cowork-allow-missing-db)


def run_instance(
    task: CoworkTask,
    bench_root: Path,
    inst_dir: Path,
    agent: AgentStep,
    agent_name: str,
    *,
    ident: RunIdentity,
    seed_path: Path | None = None,
    sidecar: PgSidecar | None = None,
    checker: CheckerRunner | None = None,
    agent_timeout_sec: float = 1800,
    diagnostic: bool = False,
    docs: TaskDocs | None = None,
    keep_sandboxes: bool = False,
    limits: Limits | None = None,
    sandbox_runtime: str | None = None,
    allow_missing_tools: bool = False,
    allow_missing_db: bool = False,
    runtime_image: str | None = None,
    pg_image: str | None = None,
    copy_limits: CopyLimits | None = None,
    seed: SeedTar | None = None,
    deadlines: Mapping[str, float | None] | None = None,
) -> InstanceResult:
    """Sidecar (unless one is given, with its network), agent phase, eval phase, teardown.

    ``seed_path`` defaults to ``<bench_root>/db/init.sql.gz``. A given ``sidecar`` is reused
    and left running (the caller owns it); otherwise everything this instance created (by
    its run and instance labels) is removed and the listing proves it, unless
    ``keep_sandboxes`` (``--keep-sandboxes``: the sidecar and network stay for inspection
    until ``harness sweep --run`` or their TTL). ``sandbox_runtime`` (``--runtime``) is the
    agent container's OCI runtime. ``runtime_image`` (``--cowork-image``) and ``pg_image``
    (``--cowork-pg-image``) are image IDs replacing the harness's own. ``diagnostic`` runs the residual diagnostic
    (audit only) while the sidecar still holds the agent's state. ``copy_limits``
    (``--max-copy-out-mb``, ``--max-copy-out-files``) cap every copy out of its containers.
    ``seed`` (``--agent command --agent-repo``) is copied into the agent container.
    ``deadlines`` (``--phase-timeout``): seconds of the provision and eval phases; past one,
    the instance is infrastructure, ``phase_timeout`` naming the phase.
    """
    inst_dir = Path(inst_dir)
    inst_dir.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    own = sidecar is None
    ttl = int(agent_timeout_sec) + TTL_MARGIN_S
    result = InstanceResult(task.instance_id, None, None, None, timings)
    try:
        runtime = result.runtime_image = runtime_image or ensure_image("runtime").image_id
        if sidecar is None:
            dump = Path(seed_path or Path(bench_root) / "db" / "init.sql.gz")
            sidecar = _provision(task, ident, dump, ttl, limits, pg_image, allow_missing_db,
                                 (deadlines or {}).get("provision"), result)  # fmt: skip
        env = InstanceEnv(task, Path(bench_root), inst_dir, sidecar.network, sidecar, ident,
                          runtime, timings, ttl_s=ttl, docs=docs, limits=limits or Limits(),
                          sandbox_runtime=sandbox_runtime, allow_missing_tools=allow_missing_tools,
                          copy_limits=copy_limits or CopyLimits(), seed=seed,
                          deadlines=deadlines or {})  # fmt: skip
        t1 = time.monotonic()
        result.summary = run_agent_phase(env, agent, agent_name, timeout_sec=agent_timeout_sec)
        timings["agent_phase_s"] = time.monotonic() - t1
        if not result.summary.infra_failed:
            _eval_phase(env, checker, diagnostic, (deadlines or {}).get("eval"), result)
    except InfraError as exc:
        result.infra = _infra_record(inst_dir, task.instance_id, exc)
    finally:
        if own:
            result.cleanup = {"kept": True} if keep_sandboxes else teardown(ident, task.instance_id)
    return result


def _infra_record(inst_dir: Path, instance_id: str, exc: InfraError) -> m.InfraRecord:
    """The instance's ``infra.json``: the infrastructure failure that ended it."""
    record = m.InfraRecord(instance_id=instance_id, reason_code=exc.reason_code,
                           stage="instance", message=str(exc)[:2000], at=now_iso())  # fmt: skip
    atomic_write_json(inst_dir / m.INFRA_RECORD, record)
    return record


def _provision(task: CoworkTask, ident: RunIdentity, dump: Path, ttl: int,
               limits: Limits | None, pg_image: str | None, allow_missing_db: bool,
               deadline: float | None, result: InstanceResult) -> PgSidecar:
    """The instance's own sidecar within the provision deadline (:func:`own_sidecar`)."""
    with phase_deadline("provision", deadline):
        return own_sidecar(task, ident, dump, ttl, limits, pg_image, allow_missing_db, result)


def own_sidecar(task: CoworkTask, ident: RunIdentity, dump: Path, ttl: int,
                limits: Limits | None, pg_image: str | None, allow_missing_db: bool,
                result: InstanceResult) -> PgSidecar:
    """The instance's own network and seeded sidecar; its image, its missing seed and its
    timings go to ``result``."""
    t0 = time.monotonic()
    sidecar = _start_sidecar(task, ident, dump, ttl, limits, pg_image, allow_missing_db)
    result.pg_image = sidecar.image_id
    result.pg_seed_missing = sidecar.seed_missing
    result.timings.update(sidecar.timings)
    result.timings["sidecar_total_s"] = time.monotonic() - t0
    return sidecar


def _eval_phase(env: InstanceEnv, checker: CheckerRunner | None, diagnostic: bool,
                deadline: float | None, result: InstanceResult) -> None:
    """The official eval within the eval deadline, then (``diagnostic``) the residual
    diagnostic while the sidecar still holds the agent's state; both go to ``result``."""
    t2 = time.monotonic()
    runner = checker or container_checker(env)
    with phase_deadline("eval", deadline):
        result.eval = evaluate_once(env.inst_dir, env.bench_root, env.task.instance_id, runner)
    result.timings["eval_s"] = time.monotonic() - t2
    if diagnostic:
        result.diagnostic = run_diagnostic(env.inst_dir, env.bench_root, env.task.instance_id,
                                           runner, enabled=True)  # fmt: skip


def _start_sidecar(task: CoworkTask, ident: RunIdentity, dump: Path, ttl: int,
                   limits: Limits | None, pg_image: str | None,
                   allow_missing_db: bool) -> PgSidecar:
    """The instance's internal network and its seeded PostgreSQL sidecar (the provision
    phase)."""
    net = create_internal_network(ident.run_id, task.instance_id, ident.worker, ident.run_root)
    return start_postgres(net, ident, task.instance_id, dump, ttl_s=ttl, limits=limits,
                          image_id=pg_image, allow_unseeded=allow_missing_db)


def teardown(ident: RunIdentity, instance_id: str) -> dict[str, object]:
    """Remove everything labelled with this run and instance, proven by a second listing
    (``sweep_incomplete`` if anything is left); the row's ``details.engine.cleanup``."""
    gone = remove_labelled(ident.labels(instance_id))
    return {"removed_containers": gone["containers"], "removed_networks": gone["networks"],
            "remaining": []}  # fmt: skip


# --------------------------------------------------------------------------- recovery


class RecoveredAttempt(BaseModel):
    """``recovered.json``: this folder's attempt is an ancestor run's, re-entered here."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: str = Field(default="harness.cowork.recovered.v1", alias="schema")
    from_run_root: str
    from_instance_dir: str
    eval_attempt_id: str
    status: str
    recovered_at: str


def _special_files(folder: str, names: list[str]) -> list[str]:
    """``copytree`` ignore: FIFOs, sockets and devices (an agent's, never opened)."""
    out = []
    for name in names:
        try:
            mode = os.lstat(os.path.join(folder, name)).st_mode
        except OSError:
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            out.append(name)
    return out


def _never_checker(req: CheckerRequest) -> CheckerRun:
    raise RuntimeError("recovery must replay the receipt, never run the checker")


def ancestor_roots(ctx: InstanceContext) -> list[Path]:
    """Ancestor run roots, nearest first (only a resumed run that runs this key has any)."""
    if ctx.key not in ctx.run.plan.attempts:
        return []
    try:  # the run model's roots: this run first, then its ancestors, nearest first
        return [p for p in run_roots(ctx.run_root).values()
                if p.resolve() != Path(ctx.run_root).resolve()]
    except Exception as exc:  # the manifest is the runner's: unreadable means no recovery
        own = ctx.result.details.setdefault(BENCHMARK, {})  # the row's Cowork section
        own["recovery_error"] = f"{type(exc).__name__}: {exc}"[:500]
        return []


def recover_attempt(ctx: InstanceContext, bench_root: Path) -> RecoveredAttempt | None:
    """Re-enter the nearest ancestor attempt whose eval finished (see the module docstring)."""
    iid = ctx.instance_id
    for root in ancestor_roots(ctx):
        src = root / BENCHMARK / iid
        if not (src / m.EVAL_CLAIM).is_file():
            continue
        status = classify_instance(src).status
        if status not in RECOVERABLE:
            continue
        # A claim exists, so this is read-only: it replays or reports why it cannot.
        if evaluate_once(src, bench_root, iid, _never_checker).kind != "replayed":
            continue
        shutil.copytree(src, ctx.instance_dir, symlinks=True, dirs_exist_ok=True,
                        ignore=_special_files)  # fmt: skip
        again = evaluate_once(ctx.instance_dir, bench_root, iid, _never_checker)
        claim = read_claim(ctx.instance_dir)
        if again.kind != "replayed" or claim is None:
            raise InfraError(
                f"recovered attempt of {iid} from {src} does not replay ({again.kind})",
                "recovery_failed",
            )
        record = RecoveredAttempt(
            from_run_root=str(root),
            from_instance_dir=str(src),
            eval_attempt_id=claim.attempt_id,
            status=status,
            recovered_at=now_iso(),
        )
        atomic_write_json(ctx.instance_dir / RECOVERED_NAME, record)
        return record
    return None


# --------------------------------------------------------------------------- the test body


def seed_for(ctx: InstanceContext, seed: AgentSeed | None) -> SeedTar | None:
    """The agent's own checkout (``--agent-repo``) for a kind that runs in the agent
    container (the command agent: the trial's ``agent_seed``), as the run recorded it; its
    record goes to ``agent_seed.json`` and the row's ``details.cowork_bench.agent_seed``.
    None for other agents (their seed runs elsewhere)."""
    if seed is None:
        return None
    try:
        recorded = read_manifest(ctx.run_root).extra.agent_source
    except Exception as exc:  # the runner's manifest: without it the copy is not checked
        raise InfraError(f"cannot read the run manifest for the agent seed: {exc}",
                         "seed_unavailable") from exc
    tar = agent_seed(seed.repo, recorded, seed.allow_dirty)
    atomic_write_json(ctx.instance_dir / SEED_RECORD, tar.record)
    ctx.output("agent_seed", ctx.instance_dir / SEED_RECORD)
    ctx.result.details.setdefault(BENCHMARK, {})["agent_seed"] = tar.record.summary()
    return tar
