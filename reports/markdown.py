"""``report.md``: the run's figures in Markdown, for pasting into a pull request."""

from __future__ import annotations

from collections.abc import Mapping

from harness.run.samples import SampleStats
from reports import fmt, samples_view
from reports.figures import CompareReport, ModelUse, ReportFigures

MAX_CHANGES = 25


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _fence(text: str) -> str:
    """A backtick fence longer than any backtick run inside ``text``."""
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |"]
    lines.append("|" + "|".join("---" for _ in header) + "|")
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def compare_markdown(cmp: CompareReport) -> list[str]:
    ci, mc = cmp.bootstrap, cmp.mcnemar
    lines = [
        f"### Compared with `{cmp.run_a.run_id}` (A) → `{cmp.run_b.run_id}` (B)",
        "",
        f"- Shared instances: {cmp.shared} (only A: {len(cmp.only_a)}, only B: {len(cmp.only_b)})",
        f"- Mean score A / B: {fmt.score(cmp.mean_a)} / {fmt.score(cmp.mean_b)}; "
        f"difference B-A {fmt.signed(ci.mean_diff)}, {ci.level:.0%} CI "
        f"[{fmt.signed(ci.low)}, {fmt.signed(ci.high)}] "
        f"(paired bootstrap, {ci.resamples} resamples, seed {ci.seed})",
        f"- Resolved A / B: {cmp.resolved_a} / {cmp.resolved_b}; McNemar b={mc.b}, c={mc.c}, "
        f"exact p={mc.exact_p:.4g}, χ²(cc)={mc.chi2:.3f} (p={mc.chi2_p:.4g})",
    ]
    if cmp.attempts_per_task_a is not None:
        lines.append(f"- Attempts: {samples_view.attempts_text(cmp)}")
    lines += [f"- ⚠ {w}" for w in cmp.warnings]
    changed = [c for c in cmp.changes if c.change != "same"]
    if changed:
        lines += ["", f"Changed instances ({len(changed)}):", ""]
        rows = [
            [
                c.key,
                c.change,
                c.status_a,
                c.status_b,
                fmt.score(c.score_a),
                fmt.score(c.score_b),
                fmt.signed(c.delta),
            ]
            for c in changed[:MAX_CHANGES]
        ]
        lines += _table(["Instance", "Change", "A", "B", "Score A", "Score B", "Δ"], rows)
        if len(changed) > MAX_CHANGES:
            lines.append(f"\n…and {len(changed) - MAX_CHANGES} more (see report.html).")
    return lines


def samples_markdown(stats: SampleStats) -> list[str]:
    """Repeated attempts: the figures with the attempts behind them, pass@k, unstable tasks."""
    lines = ["### Repeated attempts", ""]
    lines += [f"- {label}: {value}" for label, value in samples_view.summary_items(stats)]
    lines += ["", *_table(samples_view.PASS_HEADERS, samples_view.pass_rows(stats))]
    unstable = stats.unstable_tasks()
    lines += ["", f"#### Unstable tasks ({len(unstable)})", ""]
    if unstable:
        rows = samples_view.unstable_rows(stats, samples_view.MAX_UNSTABLE)
        lines += _table(samples_view.UNSTABLE_HEADERS, rows)
        if len(unstable) > len(rows):
            lines.append(f"\n…and {len(unstable) - len(rows)} more (see report.html).")
    else:
        lines.append("No task's attempts disagree.")
    return lines


def models_markdown(use: ModelUse) -> list[str]:
    """The models the rows called, and the rows flagged (a model not allowed, refused calls)."""
    lines = ["### Models", "", samples_view.models_note(use), ""]
    lines += _table(samples_view.MODEL_HEADERS, samples_view.model_rows(use))
    if use.flagged:
        lines += [
            "",
            f"**Flagged rows ({len(use.flagged)}):** calls named a model that was "
            "not allowed, or were refused",
            "",
        ]
        lines += _table(["Instance", "Flag"], [[f.key, f.flag] for f in use.flagged])
    return lines


def render_markdown(figures: ReportFigures, summary_texts: Mapping[str, str]) -> str:
    p, head = figures.provenance, figures.headline
    raw, ex = head.raw, head.with_verdict
    lines = [
        f"## harness run `{p.run_id}`",
        "",
        f"{', '.join(p.benchmarks) or 'no benchmark'} · outcome **{p.outcome}** (exit "
        f"{p.exit_code}) · {head.selected} selected · source `{p.git_head or 'unknown'}`"
        + (" (dirty)" if p.git_dirty else ""),
        "",
    ]
    if p.subset_notice:
        lines += [f"**{p.subset_notice}**", ""]
    if p.not_reportable:
        lines += [f"**not reportable:** {'; '.join(p.not_reportable)}", ""]
    lines += _table(
        ["Metric", f"Raw (÷ {raw.denominator})", f"With a verdict (÷ {ex.denominator}{fmt.excluded_note(head.excluded_reasons)})"],
        [
            ["Mean score", fmt.score(raw.mean_score), fmt.score(ex.mean_score)],
            [
                "Resolved",
                fmt.count_rate(raw.resolved, raw.resolved_rate),
                fmt.count_rate(ex.resolved, ex.resolved_rate),
            ],
            [
                "Near-resolved (≥ 0.95)",
                fmt.count_rate(raw.near_resolved, raw.near_resolved_rate),
                fmt.count_rate(ex.near_resolved, ex.near_resolved_rate),
            ],
            ["pass@1", fmt.pct(raw.pass_at_1), fmt.pct(ex.pass_at_1)],
        ],
    )
    counts = " · ".join(f"{k} {v}" for k, v in head.counts.items())
    cost, dur = head.cost, head.duration
    lines += [
        "",
        f"**Status:** {counts}",
        "",
        (
            f"**Cost:** {fmt.usd(cost.known_usd)} known over {cost.known_rows} instance(s); "
            f"{cost.unknown_rows} unknown"
            if cost.known_rows
            else f"**Cost:** unknown ({cost.unknown_rows} instance(s) report no cost)"
        )
        + (f"; {fmt.usd(cost.carried_usd)} carried from ancestors" if cost.carried_usd else "")
        + f". **Duration:** median {fmt.duration(dur.median_s)}, p90 {fmt.duration(dur.p90_s)}, "
        f"max {fmt.duration(dur.max_s)}, total {fmt.duration(dur.total_s)}.",
    ]
    if figures.warnings:
        lines += ["", *[f"- ⚠ {w}" for w in figures.warnings]]
    if figures.samples is not None:
        lines += ["", *samples_markdown(figures.samples)]
    if figures.models is not None:
        lines += ["", *models_markdown(figures.models)]
    if figures.compare:
        lines += ["", *compare_markdown(figures.compare)]
    for s in figures.official_summaries:
        text = summary_texts.get(s.path)
        if text is not None:
            fence = _fence(text)
            lines += [
                "",
                f"<details><summary>Official summary: {s.path}</summary>",
                "",
                f"{fence}text",
                text.rstrip("\n"),
                fence,
                "",
                "</details>",
            ]
    return "\n".join(lines) + "\n"
