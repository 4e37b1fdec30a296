"""The terminal summary of a run: counts by status, mean score, run root, resume command.

A run with repeated attempts (``--attempts K``, K > 1) gets one more line: the attempts
behind the figures, the mean score with its interval over tasks, pass@1 and pass@K, and
the unstable tasks (:mod:`harness.run.samples`). A K=1 run's summary is unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.run.model import RunModel
from harness.run.samples import model_stats, recorded_samples, summary_line

if TYPE_CHECKING:
    from harness.core.models import VerdictScore
    from harness.runner.controller import Controller


def verdict_text(verdict: VerdictScore | None, mean: float | None, *,
                 per_benchmark: bool = False) -> str:
    """The figure beside the raw mean when some unit has no verdict (issue 45: neither is
    shown without the other): "; 0.6250 over the 8 with a verdict (2 excluded: ...)"."""
    if verdict is None or not verdict.excluded:
        return ""
    reasons = ", ".join(f"{k} {v}" for k, v in verdict.excluded_reasons.items())
    figure = f"{mean:.4f}" if mean is not None else "no score"
    over = "over its units with a verdict" if per_benchmark else \
        f"over the {verdict.units} with a verdict"
    return f"; {figure} {over} ({verdict.excluded} excluded: {reasons})"


def print_summary(tr: Any, controller: Controller) -> None:
    m = controller.manifest
    if m is None:
        return
    tr.section("harness run", sep="=", bold=True)
    selected = m.selection.count
    counts = ", ".join(f"{k} {v}" for k, v in m.counts.items()) or "no rows"
    tr.write_line(f"run {m.run_id}: {selected} selected; {counts}")
    if m.dry_run:
        tr.write_line(f"dry run: no scores exist (no agent ran on the {selected} selected)")
    elif m.mean_score is not None:
        tr.write_line(f"mean score {m.mean_score:.4f} over {selected} (missing counts 0)"
                      + verdict_text(m.verdict_score, m.verdict_score.mean_score
                                     if m.verdict_score else None))
    by_benchmark = m.extra.mean_score_by_benchmark or {}
    if len(by_benchmark) > 1:  # one headline per benchmark, never a mean across them
        sizes = {b: sum(1 for k in m.selection.instance_ids if k.split("/", 1)[0] == b)
                 for b in by_benchmark}
        judged = (m.verdict_score.by_benchmark if m.verdict_score else None) or {}
        for name, mean in by_benchmark.items():
            tr.write_line(f"{name}: mean score {mean:.4f} over {sizes[name]} (missing counts 0)"
                          + verdict_text(m.verdict_score, judged.get(name), per_benchmark=True))
    line = samples_line(controller)
    if line is not None:
        tr.write_line(line)
    if m.subset_notice:
        tr.write_line(m.subset_notice)
    if m.not_reportable:
        tr.write_line(f"not reportable: {'; '.join(m.not_reportable)}")
    tr.write_line(
        f"outcome {m.outcome}, exit status {m.exit_code}"
        + (f", stop reason {m.stop_reason}" if m.stop_reason else "")
    )
    tr.write_line(f"run root {m.run_root}")
    if controller.report_path is not None:
        tr.write_line(f"report {controller.report_path}")
    elif controller.report_error:
        tr.write_line(f"report not written: {controller.report_error}")
    if m.outcome == "empty_selection":
        tr.write_line("nothing was selected: check -k, -m, --instance and the benchmark's filters")
    if m.outcome == "collection_failed":
        tr.write_line("collection failed: fix the errors above; no instance ran")
    if m.resume_command and m.outcome not in (
        "completed",
        "nothing_remaining",
        "dry_run",
        "empty_selection",
        "collection_failed",
    ):
        tr.write_line(f"resume with: {m.resume_command}")


def samples_line(controller: Controller) -> str | None:
    """The repeated-attempt line (K > 1), None for a K=1 run: from the figures the manifest
    recorded at session end, else computed from the controller's rows."""
    m = controller.manifest
    if m is None:
        return None
    stats = recorded_samples(m)
    if stats is None:
        try:
            stats = model_stats(RunModel.of_manifest(m), controller.rows)
        except Exception as exc:  # the summary never fails the run
            return f"attempts: figures not available ({type(exc).__name__}: {exc})"
    return summary_line(stats) if stats is not None and stats.repeated else None
