"""Session-level ProgramBench steps, in the controller: ``instance_order.json`` at admission;
batch evaluation (``--pb-eval batch``) and ``programbench info`` at the end."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import BaseModel

from benchmarks.programbench.adapter import ProgramBenchAdapter
from benchmarks.programbench.official_eval import OfficialEvalResult, evaluate_batch, run_info
from benchmarks.programbench.parity import (
    ParityFailure,
    ParityReport,
    cross_check,
    mismatch_row,
    parse_info,
)
from benchmarks.programbench.tasks import instance_order, programbench_version
from benchmarks.programbench.verdict import verdict
from harness.api import Outcome, RunContext, TaskRow, atomic_write_json, atomic_write_text

INFO_NAME = "programbench_info.txt"
SECTION = "programbench"  # run_manifest.json extra.programbench: RunRecord
PARITY_SECTION = "official_parity"  # ParityReport, or ParityFailure when info failed


class RunRecord(BaseModel):
    """``extra.programbench``: the options that chose and ordered this run's tasks."""

    programbench_version: str
    eval: str
    shuffle: bool
    shuffle_seed: int | None
    filter: str | None
    slice: str | None
    instance_order: str
    cpus: int | float
    memory: str
    docker_cpus: int
    task_timeout_sec: int | float


def write_instance_order(config: pytest.Config, run: RunContext,
                         adapter: ProgramBenchAdapter) -> None:
    s = adapter.settings(config)
    order = instance_order(adapter.selected(config), shuffle=s.shuffle, seed=s.seed,
                           filter_spec=s.filter, slice_spec=s.slice, include_fixture=True)
    atomic_write_json(run.run_root / "instance_order.json", order)
    if run.manifest is not None:
        run.manifest.extra.set_section(SECTION, RunRecord(
            programbench_version=programbench_version(), eval=s.eval_mode,
            shuffle=s.shuffle, shuffle_seed=s.seed if s.shuffle else None,
            filter=s.filter, slice=s.slice, instance_order="instance_order.json",
            cpus=s.cpus, memory=s.memory, docker_cpus=s.docker_cpus,
            task_timeout_sec=s.timeout,
        ))


def scored_row(row: TaskRow, result: OfficialEvalResult | None,
               adapter: ProgramBenchAdapter) -> TaskRow:
    """The superseding row of a batch-evaluated instance (same rule as per-task scoring)."""
    data = row.model_dump(by_alias=True)
    pending = dict(data["details"].get("eval", {}).pop("pending", None) or {})
    v = verdict(result, completed=bool(pending.get("completed", True)),
                reason=pending.get("reason"))
    data.update(v.row_fields(), ts_unix=time.time(), error=v.error,
                status=adapter.status_for(v.outcome, v.resolved))
    v.put(data["details"])
    if result is not None and result.eval_json:
        data["output_paths"]["eval_json"] = result.eval_json
    return TaskRow.model_validate(data)


def finish_session(config: pytest.Config, run: RunContext, adapter: ProgramBenchAdapter,
                   rows: dict[str, TaskRow], append: Callable[[TaskRow], None]) -> None:
    src = run.run_root / "programbench"
    if not src.is_dir() or run.dry_run:
        return
    s = adapter.settings(config)
    latest = dict(rows)
    pending = {r.instance_id: r for r in rows.values()
               if r.benchmark == adapter.name and r.official_eval_status == "pending"}
    if pending:
        blob_dirs = {(r.details.eval.pending or {}).get("blob_dir") for r in pending.values()}
        blob = next((b for b in blob_dirs if b), None)
        results = evaluate_batch(src, sorted(pending), docker_cpus=s.docker_cpus, blob_dir=blob)
        for iid, row in pending.items():
            new = scored_row(row, results.get(iid), adapter)
            append(new)
            latest[new.key] = new
    if any(Path(p).exists() for p in src.glob("*/*.eval.json")):
        text = _info(run, src, INFO_NAME)
        check_parity(run, adapter, text, latest, append)
    check_attempt_parity(run, adapter, latest, append)


def _info(run: RunContext, src: Path, name: str) -> str | None:
    """``programbench info`` over ``src``, kept as ``name`` in the run root (None: failed)."""
    try:
        text: str | None = run_info(src)
        kept = text or ""
    except (RuntimeError, OSError) as exc:
        text, kept = None, f"programbench info failed: {exc}\n"
    atomic_write_text(run.run_root / name, kept)
    if run.manifest is not None:
        extra = run.manifest.extra
        extra.official_summaries = [*(extra.official_summaries or []), name]
    return text


class AttemptParity(BaseModel):
    """``extra.official_parity_attempts``: parity of each attempt's evaluations (--attempts
    K), one ``programbench info`` per attempt over the tasks it scored."""

    by_attempt: dict[str, ParityReport | ParityFailure]


ATTEMPT_PARITY_SECTION = "official_parity_attempts"


def attempt_views(run_root: Path, latest: dict[str, TaskRow], name: str,
                  into: Path) -> dict[int, tuple[Path, dict[str, TaskRow]]]:
    """Per attempt k: a folder of links ``<task> -> `` the attempt's own eval folder (the row
    records its eval.json), and the attempt's rows under the task's id (as ``programbench
    info`` names them). Only rows this run scored (carried ones have their ancestor's)."""
    out: dict[int, tuple[Path, dict[str, TaskRow]]] = {}
    for row in latest.values():
        recorded = (row.output_paths or {}).get("eval_json")
        eval_json = run_root / recorded if recorded else None  # an absolute one stays
        if (row.benchmark != name or row.sample is None or row.outcome is Outcome.CARRIED
                or eval_json is None or not eval_json.is_file()):
            continue
        view, rows = out.setdefault(row.sample, (into / f"attempt-{row.sample}", {}))
        link = view / row.task_id
        view.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(eval_json.parent.resolve())
        rows[row.task_id] = row.model_copy(update={"instance_id": row.task_id, "sample": None})
    return out


def check_attempt_parity(run: RunContext, adapter: ProgramBenchAdapter,
                         latest: dict[str, TaskRow], append: Callable[[TaskRow], None]) -> None:
    """Parity for the evaluations of attempts (``--attempts K``): one ``programbench info``
    per attempt over the links of :func:`attempt_views`; a mismatch supersedes the attempt's
    row as for one attempt per task."""
    with tempfile.TemporaryDirectory(prefix="pb-parity-") as into:
        views = attempt_views(run.run_root, latest, adapter.name, Path(into))
        by_attempt = {str(k): _attempt_parity(run, adapter, k, view, rows, latest, append)
                      for k, (view, rows) in sorted(views.items())}
    if by_attempt and run.manifest is not None:
        run.manifest.extra.set_section(ATTEMPT_PARITY_SECTION, AttemptParity(
            by_attempt=by_attempt))


def _attempt_parity(run: RunContext, adapter: ProgramBenchAdapter, k: int, view: Path,
                    rows: dict[str, TaskRow], latest: dict[str, TaskRow],
                    append: Callable[[TaskRow], None]) -> ParityReport | ParityFailure:
    text = _info(run, view, f"programbench_info.attempt-{k}.txt")
    if text is None:
        return ParityFailure(error="programbench info failed")
    report = cross_check(parse_info(text), {f"{adapter.name}/{t}": r for t, r in rows.items()})
    for mismatch in report.mismatches:
        row = latest.get(f"{adapter.name}/{mismatch.instance_id}@{k}")
        if row is not None:
            append(mismatch_row(row, mismatch, adapter.status_for(Outcome.INFRA_FAILED, None)))
    return report


def check_parity(run: RunContext, adapter: ProgramBenchAdapter, info_text: str | None,
                 latest: dict[str, TaskRow], append: Callable[[TaskRow], None]) -> None:
    """Cross-check every official score and the headline with ``programbench info``: a
    disagreement becomes an error row (see :mod:`benchmarks.programbench.parity`)."""
    if info_text is None:
        if run.manifest is not None:
            run.manifest.extra.set_section(
                PARITY_SECTION, ParityFailure(error="programbench info failed"))
        return
    report = cross_check(parse_info(info_text), latest)
    rows = {r.instance_id: r for r in latest.values() if r.benchmark == adapter.name}
    for mismatch in report.mismatches:
        row = rows.get(mismatch.instance_id)
        if row is not None:
            append(mismatch_row(row, mismatch, adapter.status_for(Outcome.INFRA_FAILED, None)))
    if run.manifest is not None:
        extra = run.manifest.extra
        extra.set_section(PARITY_SECTION, report)
        if not report.headline_ok:
            extra.finish_errors = [*(extra.finish_errors or []), (
                f"official parity: headline {report.headline_ours} over "
                f"{report.headline_instances_ours} instance(s), programbench info says "
                f"{report.headline_official} over {report.headline_instances_official}")]
