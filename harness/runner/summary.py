"""The terminal summary of a run: counts by status, mean score, run root, resume command."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.runner.controller import Controller


def print_summary(tr: Any, controller: Controller) -> None:
    m = controller.manifest
    if m is None:
        return
    tr.section("harness run", sep="=", bold=True)
    selected = m.selection.count
    counts = ", ".join(f"{k} {v}" for k, v in m.counts.items()) or "no rows"
    tr.write_line(f"run {m.run_id}: {selected} selected; {counts}")
    if m.mean_score is not None:
        tr.write_line(f"mean score {m.mean_score:.4f} over {selected} (missing counts 0)")
    if m.subset_notice:
        tr.write_line(m.subset_notice)
    if m.not_reportable:
        tr.write_line(f"not reportable: {'; '.join(m.not_reportable)}")
    tr.write_line(f"outcome {m.outcome}, exit status {m.exit_code}"
                  + (f", stop reason {m.stop_reason}" if m.stop_reason else ""))
    tr.write_line(f"run root {m.run_root}")
    if controller.report_path is not None:
        tr.write_line(f"report {controller.report_path}")
    elif controller.report_error:
        tr.write_line(f"report not written: {controller.report_error}")
    if m.outcome == "empty_selection":
        tr.write_line("nothing was selected: check -k, -m, --instance and the benchmark's filters")
    if m.outcome == "collection_failed":
        tr.write_line("collection failed: fix the errors above; no instance ran")
    if m.resume_command and m.outcome not in ("completed", "nothing_remaining", "dry_run", "empty_selection",
                                             "collection_failed"):
        tr.write_line(f"resume with: {m.resume_command}")
