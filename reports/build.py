"""Assemble the figures of a run (``report.json``) and of a comparison from loaded runs."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from pathlib import Path

from harness.run.model import RunModel
from harness.run.samples import SampleStats, model_stats
from reports.compare import compare_results
from reports.figures import (
    CompareReport,
    Headline,
    InstanceResult,
    OfficialSummary,
    Provenance,
    ReportFigures,
    RunRef,
)
from reports.metrics import headline
from reports.model_use import model_use
from reports.run import RunData
from reports.stats import DEFAULT_RESAMPLES

MAX_SUMMARY_BYTES = 512 * 1024


def provenance(run: RunData) -> Provenance:
    m = run.manifest
    return Provenance(
        run_id=m.run_id,
        run_root=m.run_root,
        created_at=m.created_at,
        finished_at_unix=m.finished_at_unix,
        outcome=m.outcome,
        exit_code=m.exit_code,
        stop_reason=m.stop_reason,
        argv=list(m.argv),
        benchmarks=list(m.benchmarks),
        benchmark_versions=dict(m.benchmark_versions),
        harness_version=m.versions.harness,
        python=m.versions.python,
        pytest=m.versions.pytest,
        platform=m.versions.platform,
        git_head=m.source.head,
        git_branch=m.source.branch,
        git_dirty=m.source.dirty,
        config_fingerprint=m.config_fingerprint,
        dry_run=m.dry_run,
        workers=m.workers,
        shard=str(m.shard) if m.shard else None,
        selection_source=m.selection.source,
        resume_ancestors=list(m.resume.ancestor_run_ids or m.resume.ancestors),
        resume_generation=m.resume.generation,
        reportable=m.reportable,
        not_reportable=list(m.not_reportable),
        subset_notice=m.subset_notice,
    )


def summary_paths(run: RunData) -> tuple[list[str], list[str]]:
    """Relative paths of the official summaries the run declares
    (``manifest.extra.official_summaries``), and warnings about bad entries."""
    paths: list[str] = []
    warnings: list[str] = []
    if "official_summaries" in run.manifest.extra.unread:
        warnings.append("manifest.extra.official_summaries is not a list of paths; ignored")
    for entry in run.manifest.extra.official_summaries or []:
        rel = Path(entry)
        if rel.is_absolute() or ".." in rel.parts or rel.suffix != ".txt":
            warnings.append(f"official summary {entry!r} ignored: give a relative *.txt path")
            continue
        if rel.as_posix() not in paths:
            paths.append(rel.as_posix())
    return paths, warnings


def read_summary(run_root: Path, rel: str) -> str | None:
    path = run_root / rel
    try:
        data = path.read_bytes()[:MAX_SUMMARY_BYTES]
    except OSError:
        return None
    return data.decode("utf-8", errors="replace")


def official_summaries(run: RunData) -> tuple[list[OfficialSummary], list[str]]:
    paths, warnings = summary_paths(run)
    out = []
    for rel in paths:
        path = run.root / rel
        present = path.is_file()
        digest = None
        if present:
            digest = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        else:
            warnings.append(f"official summary {rel} is declared but missing")
        out.append(OfficialSummary(path=rel, present=present, sha256=digest))
    return out, warnings


def by_benchmark(results: list[InstanceResult]) -> dict[str, Headline]:
    groups: dict[str, list[InstanceResult]] = defaultdict(list)
    for r in results:
        groups[r.benchmark].append(r)
    if len(groups) < 2:
        return {}
    return {name: headline(rs, len(rs)) for name, rs in sorted(groups.items())}


def run_ref(run: RunData) -> RunRef:
    return RunRef(run_id=run.run_id, run_root=run.manifest.run_root, selected=run.selected)


def compare_runs(
    a: RunData, b: RunData, *, resamples: int = DEFAULT_RESAMPLES, seed: int = 0
) -> CompareReport:
    return compare_results(
        run_ref(a), a.results, run_ref(b), b.results, resamples=resamples, seed=seed
    )


def run_samples(
    run: RunData, *, resamples: int = DEFAULT_RESAMPLES, seed: int = 0
) -> SampleStats | None:
    """The repeated-attempt figures of a run with K > 1 attempts per task; None for K=1."""
    return model_stats(RunModel.of_manifest(run.manifest), run.rows, resamples=resamples,
                       seed=seed)


def build_figures(
    run: RunData,
    compare: CompareReport | None = None,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> ReportFigures:
    summaries, summary_warnings = official_summaries(run)
    return ReportFigures(
        provenance=provenance(run),
        headline=headline(run.results, run.selected),
        by_benchmark=by_benchmark(run.results),
        instances=run.results,
        outside_selection=run.outside,
        official_summaries=summaries,
        warnings=[*run.warnings, *summary_warnings],
        compare=compare,
        samples=run_samples(run, resamples=resamples, seed=seed),
        models=model_use(run.results),
    )
