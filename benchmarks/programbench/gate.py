"""``harness programbench gate RUN --reference SCORES.json [--baseline SCORES.json]``.

The Gate-20 procedure as code: pair the run's per-instance scores (its ledger,
``<run>/result_index.jsonl``) with a leaderboard entry by instance id, compare paired means
on the shared subset with a seeded bootstrap 95% interval of the mean difference, and decide:

* PASS when the run's paired mean is >= the reference's paired mean on the instances both
  have, and (with ``--baseline``) >= the baseline's paired mean on the instances the run
  and the baseline share; FAIL otherwise, or when a comparison has no pair at all.

``--tasks FILE`` (Gate-20: ``{"smoke": [10 ids], "unseen": [10 ids]}``, recorded in
``gate.json``) fixes the instances: the reference's paired mean is over ALL of them (a task
the reference lacks counts 0 for it, as the leaderboard's headline counts it), the
baseline's over those it has. Every listed task must be scored in the run: a missing or
infrastructure-failed task is never dropped or guessed; the gate refuses (exit 2) and lists
the unscored tasks, so the operator resumes the run and gates again. Without ``--tasks``
the run's own ledger instances are the list, with the same refusal.

Host load: the 1-minute load average at the gate's start and end (and the run's, from its
manifest, when recorded) is written to ``gate.json``; above ``--max-load-per-cpu`` (default
1.0) per CPU the gate warns that the host was overloaded (the methodology pauses and
re-runs rather than failing on an overloaded host).

Per-test references are reduced per instance on the common key set of the reference and the
run's own eval.json when the run kept one (the row's ``output_paths``, else
``<run>/programbench/<iid>/<task id>.eval.json``; a regular file inside the run root, never
a link: :mod:`benchmarks.programbench.kept_files`), both less the installed tests.json
ignore list; otherwise on the reference's keys less that list, paired with the ledger
score. Each pair says which basis it used.

Repeated attempts (a run with ``--attempts K``): the gate pairs by task. A task's run score
is the mean over its K attempts (each reduced as above, from its own eval.json when that
exists) and the bootstrap resamples tasks, each with its attempts. Every selected attempt
of a listed task must be scored, as every task must: a missing or infrastructure-failed
attempt refuses the gate (exit 2) and is listed, never dropped from the mean. A K=1 run is
gated exactly as before.

``gate.json`` is written to the run root (or ``--output``) with exclusive create: a gate
verdict is a record and is never overwritten; pass another ``--output`` to gate again.
Exit status: 0 PASS, 1 FAIL, 2 refused (bad input, existing output).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from benchmarks.programbench.gate_inputs import (
    GateRefused,
    HostLoad,
    RunTasks,
    TaskList,
    host_load,
    load_tasks,
    read_run_tasks,
)
from benchmarks.programbench.scores import (
    RunScore,
    ScoresFile,
    current_keys,
    load_scores,
    reduce_tests,
)
from benchmarks.programbench.tasks import programbench_version
from harness.api import create_exclusive, ledger_path
from reports.stats import bootstrap_mean_ci

GATE_SCHEMA = "harness.programbench.gate.v1"
GATE_NAME = "gate.json"
DEFAULT_SEED = 0
DEFAULT_RESAMPLES = 10_000
LEVEL = 0.95
EPS = 1e-12
DEFAULT_MAX_LOAD_PER_CPU = 1.0


class _OmitUnset(BaseModel):
    """Newer optional fields (:attr:`OMIT_NONE`) are left out of ``gate.json`` while unset:
    a K=1 gate record keeps its old shape."""

    OMIT_NONE: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if not isinstance(data, dict):
            return data
        return {k: v for k, v in data.items() if not (k in self.OMIT_NONE and v is None)}


class Pair(_OmitUnset):
    model_config = ConfigDict(extra="forbid")

    instance_id: str  # the task
    run: float  # with repeated attempts: the mean over the task's attempts
    reference: float
    diff: float
    basis: Literal["instance_score", "common_keys", "mixed"]  # mixed: attempts differ
    n_keys: int | None = None
    reference_missing: bool = False  # the other entry lacks this task: it counts 0 for it
    # Repeated attempts: the attempts' instance ids and run scores (left out for K=1)
    attempts: list[str] | None = None
    attempt_scores: list[float] | None = None

    OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"attempts", "attempt_scores"})


class Comparison(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["reference", "baseline"]
    name: str
    path: str
    format: Literal["per_instance", "per_test"]
    n_pairs: int
    run_mean: float | None
    other_mean: float | None
    mean_diff: float | None
    ci_low: float | None
    ci_high: float | None
    passed: bool
    only_in_run: list[str] = Field(default_factory=list)
    pairs: list[Pair] = Field(default_factory=list)


class GateReport(_OmitUnset):
    """``gate.json``."""

    model_config = ConfigDict(extra="forbid")

    schema_: str = Field(default=GATE_SCHEMA, alias="schema")
    run_root: str
    created_at_unix: float
    programbench_version: str
    seed: int
    resamples: int
    level: float = LEVEL
    run_scored: int
    unscored: list[RunScore] = Field(default_factory=list)
    tasks: TaskList | None = None
    host_load: HostLoad
    reference: Comparison
    baseline: Comparison | None = None
    verdict: Literal["PASS", "FAIL"]
    reasons: list[str] = Field(default_factory=list)
    # Repeated attempts: the most attempts one task has, and the attempts scored (left out
    # for K=1; ``run_scored`` then counts tasks)
    attempts_per_task: int | None = None
    attempts_scored: int | None = None

    OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"attempts_per_task", "attempts_scored"})


def _run_tests(eval_json: Path | None, task: str) -> dict[str, bool] | None:
    """The per-test results of ``task`` in ``eval_json`` (None when absent or unreadable)."""
    if eval_json is None:
        return None
    from benchmarks.programbench.official_eval import per_test_outcomes

    try:
        return per_test_outcomes(task, eval_json)
    except Exception:
        return None


def _pair(
    evals: Mapping[str, Path], run: RunScore, other: ScoresFile, task: str | None = None
) -> Pair:
    """One pair; ``task``: ``run`` is an attempt (its own instance id) at that task;
    ``evals``: instance id -> its kept eval.json."""
    iid = task or run.instance_id
    assert run.score is not None
    ref_tests = (other.per_test or {}).get(iid)
    if ref_tests is not None:
        mine = _run_tests(evals.get(run.instance_id), iid)
        if mine:
            common = current_keys(iid, set(ref_tests) & set(mine))
            ref_score, run_score = reduce_tests(ref_tests, common), reduce_tests(mine, common)
            if ref_score is not None and run_score is not None:
                return Pair(
                    instance_id=iid,
                    run=run_score,
                    reference=ref_score,
                    diff=run_score - ref_score,
                    basis="common_keys",
                    n_keys=len(common),
                )
    ref = other.scores.get(iid)
    return Pair(
        instance_id=iid,
        run=run.score,
        reference=ref or 0.0,
        diff=run.score - (ref or 0.0),
        basis="instance_score",
        reference_missing=ref is None,
    )


def _task_pair(
    evals: Mapping[str, Path], attempts: list[RunScore], other: ScoresFile, task: str
) -> Pair:
    """A task's pair: its one attempt's (K=1), or the means over its attempts' pairs."""
    if len(attempts) == 1 and attempts[0].instance_id == task:
        return _pair(evals, attempts[0], other)
    pairs = [_pair(evals, a, other, task) for a in attempts]
    n = len(pairs)
    run = sum(p.run for p in pairs) / n
    reference = sum(p.reference for p in pairs) / n
    bases = {p.basis for p in pairs}
    keys = {p.n_keys for p in pairs}
    return Pair(
        instance_id=task,
        run=run,
        reference=reference,
        diff=run - reference,
        basis=bases.pop() if len(bases) == 1 else "mixed",
        n_keys=keys.pop() if len(keys) == 1 else None,
        reference_missing=pairs[0].reference_missing,
        attempts=[a.instance_id for a in attempts],
        attempt_scores=[p.run for p in pairs],
    )


def compare(
    run: RunTasks,
    other: ScoresFile,
    *,
    role: Literal["reference", "baseline"],
    seed: int = DEFAULT_SEED,
    resamples: int = DEFAULT_RESAMPLES,
    over: list[str] | None = None,
) -> Comparison:
    """Pairs on the instances both have, or (``over``) on every listed one: a listed
    instance the other entry lacks counts 0 for it. ``run.scored``: per task, its attempts'
    scores (K=1: the instance's one; repeated attempts: the task's pair is their mean)."""
    scored = run.scored
    shared = sorted(over) if over is not None else sorted(set(scored) & set(other.scores))
    pairs = [_task_pair(run.eval_json, scored[iid], other, iid) for iid in shared]
    n = len(pairs)
    run_mean = sum(p.run for p in pairs) / n if n else None
    other_mean = sum(p.reference for p in pairs) / n if n else None
    diffs = [p.diff for p in pairs]
    ci = bootstrap_mean_ci(diffs, level=LEVEL, resamples=resamples, seed=seed) if n else None
    mean_diff = sum(diffs) / n if n else None
    return Comparison(
        role=role,
        name=other.name,
        path=other.path,
        format=other.format,
        n_pairs=n,
        run_mean=run_mean,
        other_mean=other_mean,
        mean_diff=mean_diff,
        ci_low=ci[0] if ci else None,
        ci_high=ci[1] if ci else None,
        passed=bool(n) and mean_diff is not None and mean_diff >= -EPS,
        only_in_run=sorted(set(scored) - set(other.scores)),
        pairs=pairs,
    )


def _refuse_unscored(run: RunTasks, wanted: Sequence[str], run_root: Path) -> None:
    """GateRefused when a gate task is unscored: it is never dropped."""
    missing = [i for i in wanted if i not in run.scored]
    if missing:
        listed = ", ".join(
            f"{i} ({'; '.join(run.unscored_tasks.get(i, ['no row']))})" for i in missing
        )
        raise GateRefused(
            f"{len(missing)} gate task(s) unscored (missing or infra-failed), never dropped: "
            f"{listed}; resume the run (--resume-from {run_root}) and gate the new root"
        )


def _failures(*comparisons: Comparison | None) -> list[str]:
    """Why the gate fails, one reason per comparison that does not pass."""
    reasons: list[str] = []
    for comp in comparisons:
        if comp is None:
            continue
        if comp.n_pairs == 0:
            reasons.append(f"no instance is shared with the {comp.role} {comp.name}")
        elif not comp.passed:
            reasons.append(
                f"paired mean {comp.run_mean:.4f} < {comp.role} {comp.name} {comp.other_mean:.4f} "
                f"on {comp.n_pairs} shared instances"
            )
    return reasons


def run_gate(
    run_root: Path,
    reference: Path,
    baseline: Path | None = None,
    *,
    seed: int = DEFAULT_SEED,
    resamples: int = DEFAULT_RESAMPLES,
    tasks: TaskList | None = None,
    max_load_per_cpu: float = DEFAULT_MAX_LOAD_PER_CPU,
) -> GateReport:
    """Compute the gate (nothing is written). GateRefused when a task is unscored."""
    load_start = os.getloadavg()
    ledger = ledger_path(run_root)
    if not ledger.exists():
        raise FileNotFoundError(f"no ledger at {ledger}: is {run_root} a run root?")
    run = read_run_tasks(run_root)
    wanted = tasks.all if tasks is not None else sorted(set(run.scored) | set(run.unscored_tasks))
    _refuse_unscored(run, wanted, run_root)
    ref_scores = load_scores(reference)
    ref = compare(
        run,
        ref_scores,
        role="reference",
        seed=seed,
        resamples=resamples,
        over=wanted if tasks is not None else None,
    )
    base = None
    if baseline is not None:
        base_scores = load_scores(baseline)
        shared = [i for i in wanted if i in base_scores.scores] if tasks is not None else None
        base = compare(
            run,
            base_scores,
            role="baseline",
            seed=seed,
            resamples=resamples,
            over=shared,
        )
    reasons = _failures(ref, base)
    load = host_load(run_root, load_start, max_load_per_cpu)
    if load.overloaded and reasons:
        reasons.append(
            f"host overloaded (peak load {load.peak_per_cpu:.2f} per CPU): the "
            f"methodology pauses and re-runs instead of failing"
        )
    report = GateReport(
        run_root=str(run_root),
        created_at_unix=time.time(),
        programbench_version=programbench_version(),
        seed=seed,
        resamples=resamples,
        run_scored=len(run.scored),
        unscored=run.unscored,
        tasks=tasks,
        host_load=load,
        reference=ref,
        baseline=base,
        verdict="FAIL" if reasons else "PASS",
        reasons=reasons,
    )
    if run.repeated:  # K=1 records keep their shape
        report.attempts_per_task = run.attempts_per_task
        report.attempts_scored = sum(len(v) for v in run.scored.values())
    return report


def write_gate(report: GateReport, path: Path) -> None:
    """Exclusive create: an existing gate record is never overwritten (FileExistsError)."""
    data = (report.model_dump_json(by_alias=True, indent=2) + "\n").encode()
    if not create_exclusive(path, data):
        raise FileExistsError(path)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def render(report: GateReport) -> str:
    lines = [f"ProgramBench gate: {report.verdict}  ({report.run_root})"]
    if report.attempts_per_task is None:
        lines.append(
            f"  run instances scored: {report.run_scored}, not scored: {len(report.unscored)}"
        )
    else:
        lines.append(
            f"  run tasks scored: {report.run_scored} with {report.attempts_scored} attempts "
            f"(up to {report.attempts_per_task} per task; pairs use each task's mean), "
            f"attempts not scored: {len(report.unscored)}"
        )
    if report.tasks is not None:
        lines.append(
            f"  tasks {report.tasks.path}: {len(report.tasks.smoke)} smoke + "
            f"{len(report.tasks.unseen)} unseen"
        )
    load = report.host_load
    lines.append(
        f"  host load (1 min) start {load.start[0]:.2f}, end {load.end[0]:.2f} on "
        f"{load.cpus} CPU(s)"
    )
    for comp in (report.reference, report.baseline):
        if comp is None:
            continue
        lines.append(
            f"  vs {comp.role} {comp.name} ({comp.format}): {comp.n_pairs} pairs, run "
            f"{_fmt(comp.run_mean)} vs {_fmt(comp.other_mean)}, diff {_fmt(comp.mean_diff)} "
            f"[{_fmt(comp.ci_low)}, {_fmt(comp.ci_high)}] 95% CI -> "
            f"{'pass' if comp.passed else 'fail'}"
        )
    lines.extend(f"  reason: {r}" for r in report.reasons)
    return "\n".join(lines)


def gate_command(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="harness programbench gate",
        description="Paired comparison of a run with leaderboard per-task scores.",
    )
    parser.add_argument("run", type=Path, help="run root holding result_index.jsonl")
    parser.add_argument("--reference", type=Path, required=True, help="scores file to match")
    parser.add_argument("--baseline", type=Path, help="scores file the run must not fall below")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES)
    parser.add_argument("--output", type=Path, help=f"where to write (default RUN/{GATE_NAME})")
    parser.add_argument(
        "--tasks",
        type=Path,
        metavar="FILE",
        help='Gate-20 task list: {"smoke": [10 ids], "unseen": [10 ids]}',
    )
    parser.add_argument(
        "--max-load-per-cpu",
        type=float,
        default=DEFAULT_MAX_LOAD_PER_CPU,
        help="warn that the host was overloaded above this 1-minute load "
        f"average per CPU (default {DEFAULT_MAX_LOAD_PER_CPU:g})",
    )
    try:
        args = parser.parse_args(None if argv is None else list(argv))
    except SystemExit as exc:
        return 0 if exc.code == 0 else 2
    out = args.output or args.run / GATE_NAME
    if out.exists():
        print(
            f"refused: {out} exists (a gate record is never overwritten); pass --output",
            file=sys.stderr,
        )
        return 2
    try:
        tasks = load_tasks(args.tasks) if args.tasks is not None else None
        report = run_gate(
            args.run,
            args.reference,
            args.baseline,
            seed=args.seed,
            resamples=args.resamples,
            tasks=tasks,
            max_load_per_cpu=args.max_load_per_cpu,
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        write_gate(report, out)
    except (OSError, ValueError) as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 2
    print(render(report))
    print(f"  written: {out}")
    if report.host_load.overloaded:
        print(
            f"warning: host overloaded during the gate or the run (peak 1-minute load "
            f"{report.host_load.peak_per_cpu:.2f} per CPU >= {args.max_load_per_cpu:g}): "
            f"pause and re-run when contention clears; load data is in {out}",
            file=sys.stderr,
        )
    return 0 if report.verdict == "PASS" else 1
