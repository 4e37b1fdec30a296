"""``harness programbench gate RUN --reference SCORES.json [--baseline SCORES.json]``.

The Gate-20 procedure as code: pair the run's per-instance scores (its ledger,
``<run>/result_index.jsonl``) with a leaderboard entry by instance id, compare paired means
on the shared subset with a seeded bootstrap 95% interval of the mean difference, and decide:

* PASS when the run's paired mean is >= the reference's paired mean on the instances both
  have, and (with ``--baseline``) >= the baseline's paired mean on the instances the run
  and the baseline share; FAIL otherwise, or when a comparison has no pair at all.

Per-test references are reduced per instance on the common key set of the reference and the
run's own eval.json (``<run>/programbench/<iid>/<iid>.eval.json``) when that exists, both
less the installed tests.json ignore list; otherwise on the reference's keys less that list,
paired with the ledger score. Each pair says which basis it used.

``gate.json`` is written to the run root (or ``--output``) with exclusive create: a gate
verdict is a record and is never overwritten; pass another ``--output`` to gate again.
Exit status: 0 PASS, 1 FAIL, 2 refused (bad input, existing output).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from benchmarks.programbench.scores import (
    RunScore,
    ScoresFile,
    current_keys,
    load_scores,
    read_run_scores,
    reduce_tests,
)
from benchmarks.programbench.tasks import programbench_version
from harness.fsutil import create_exclusive
from harness.ledger import ledger_path
from reports.stats import bootstrap_mean_ci

GATE_SCHEMA = "harness.programbench.gate.v1"
GATE_NAME = "gate.json"
DEFAULT_SEED = 0
DEFAULT_RESAMPLES = 10_000
LEVEL = 0.95
EPS = 1e-12


class Pair(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instance_id: str
    run: float
    reference: float
    diff: float
    basis: Literal["instance_score", "common_keys"]
    n_keys: int | None = None


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


class GateReport(BaseModel):
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
    reference: Comparison
    baseline: Comparison | None = None
    verdict: Literal["PASS", "FAIL"]
    reasons: list[str] = Field(default_factory=list)


def _run_tests(run_root: Path, iid: str) -> dict[str, bool] | None:
    eval_json = run_root / "programbench" / iid / f"{iid}.eval.json"
    if not eval_json.exists():
        return None
    from benchmarks.programbench.official_eval import per_test_outcomes

    try:
        return per_test_outcomes(iid, eval_json)
    except Exception:
        return None


def _pair(run_root: Path, run: RunScore, other: ScoresFile) -> Pair:
    iid = run.instance_id
    assert run.score is not None
    ref_tests = (other.per_test or {}).get(iid)
    if ref_tests is not None:
        mine = _run_tests(run_root, iid)
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
    ref = other.scores[iid]
    return Pair(
        instance_id=iid, run=run.score, reference=ref, diff=run.score - ref, basis="instance_score"
    )


def compare(
    run_root: Path,
    scored: dict[str, RunScore],
    other: ScoresFile,
    *,
    role: Literal["reference", "baseline"],
    seed: int = DEFAULT_SEED,
    resamples: int = DEFAULT_RESAMPLES,
) -> Comparison:
    shared = sorted(set(scored) & set(other.scores))
    pairs = [_pair(run_root, scored[iid], other) for iid in shared]
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


def run_gate(
    run_root: Path,
    reference: Path,
    baseline: Path | None = None,
    *,
    seed: int = DEFAULT_SEED,
    resamples: int = DEFAULT_RESAMPLES,
) -> GateReport:
    """Compute the gate (nothing is written)."""
    ledger = ledger_path(run_root)
    if not ledger.exists():
        raise FileNotFoundError(f"no ledger at {ledger}: is {run_root} a run root?")
    scored, unscored = read_run_scores(ledger)
    ref = compare(
        run_root, scored, load_scores(reference), role="reference", seed=seed, resamples=resamples
    )
    base = None
    if baseline is not None:
        base = compare(
            run_root, scored, load_scores(baseline), role="baseline", seed=seed, resamples=resamples
        )
    reasons: list[str] = []
    for comp in (ref, base):
        if comp is None:
            continue
        if comp.n_pairs == 0:
            reasons.append(f"no instance is shared with the {comp.role} {comp.name}")
        elif not comp.passed:
            reasons.append(
                f"paired mean {comp.run_mean:.4f} < {comp.role} {comp.name} {comp.other_mean:.4f} "
                f"on {comp.n_pairs} shared instances"
            )
    return GateReport(
        run_root=str(run_root),
        created_at_unix=time.time(),
        programbench_version=programbench_version(),
        seed=seed,
        resamples=resamples,
        run_scored=len(scored),
        unscored=unscored,
        reference=ref,
        baseline=base,
        verdict="FAIL" if reasons else "PASS",
        reasons=reasons,
    )


def write_gate(report: GateReport, path: Path) -> None:
    """Exclusive create: an existing gate record is never overwritten (FileExistsError)."""
    data = (report.model_dump_json(by_alias=True, indent=2) + "\n").encode()
    if not create_exclusive(path, data):
        raise FileExistsError(path)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def render(report: GateReport) -> str:
    lines = [f"ProgramBench gate: {report.verdict}  ({report.run_root})"]
    lines.append(f"  run instances scored: {report.run_scored}, not scored: {len(report.unscored)}")
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
        report = run_gate(
            args.run, args.reference, args.baseline, seed=args.seed, resamples=args.resamples
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        write_gate(report, out)
    except (OSError, ValueError) as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 2
    print(render(report))
    print(f"  written: {out}")
    return 0 if report.verdict == "PASS" else 1
