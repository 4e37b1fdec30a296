"""The self-contained HTML run report: inline CSS, inline JS, inline SVG, no network."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from html import escape
from pathlib import Path

from reports import fmt
from reports.charts import per_instance_chart, score_histogram, status_breakdown
from reports.figures import Headline, Provenance, ReportFigures
from reports.html_tables import Links, compare_section, instance_section, instance_table

ASSETS = Path(__file__).resolve().parent / "assets"


def _asset(name: str) -> str:
    return (ASSETS / name).read_text(encoding="utf-8")


def _card(value: str, label: str) -> str:
    return f'<div class="card"><div class="v">{escape(value)}</div><div class="l">{escape(label)}</div></div>'


def rates_table(head: Headline) -> str:
    raw, ex = head.raw, head.infra_excluded
    rows = [
        ("Mean score", fmt.score(raw.mean_score), fmt.score(ex.mean_score)),
        (
            "Resolved (score ≥ 1.0)",
            fmt.count_rate(raw.resolved, raw.resolved_rate),
            fmt.count_rate(ex.resolved, ex.resolved_rate),
        ),
        (
            "Near-resolved (score ≥ 0.95)",
            fmt.count_rate(raw.near_resolved, raw.near_resolved_rate),
            fmt.count_rate(ex.near_resolved, ex.near_resolved_rate),
        ),
        ("pass@1", fmt.pct(raw.pass_at_1), fmt.pct(ex.pass_at_1)),
    ]
    body = "".join(
        f'<tr><th scope="row">{escape(name)}</th><td class="num">{escape(a)}</td>'
        f'<td class="num">{escape(b)}</td></tr>'
        for name, a, b in rows
    )
    return (
        '<table class="metrics" id="headline-table"><thead><tr><th></th>'
        f'<th class="num">Raw (÷ {raw.denominator} selected)</th>'
        f'<th class="num">Excluding infra (÷ {ex.denominator})</th></tr></thead>'
        f"<tbody>{body}</tbody></table>"
    )


def headline_section(head: Headline, by_benchmark: Mapping[str, Headline]) -> str:
    cost = head.cost
    dur = head.duration
    cards = [
        _card(fmt.score(head.raw.mean_score), "mean score (missing = 0)"),
        _card(fmt.count_rate(head.raw.resolved, head.raw.resolved_rate), "resolved"),
        _card(fmt.count_rate(head.raw.near_resolved, head.raw.near_resolved_rate), "near-resolved"),
        _card(str(head.selected), "selected"),
        _card(str(head.attempted), "attempted"),
        _card(str(head.not_attempted), "not attempted"),
        _card(str(head.infra_failed), "infra_failed"),
        _card(str(head.carried), "carried forward"),
        _card(
            fmt.usd(cost.known_usd) if cost.known_rows else "unknown",
            f"cost known ({cost.known_rows} rows)",
        ),
        _card(str(cost.unknown_rows), "rows with unknown cost"),
        _card(fmt.duration(dur.median_s), f"median duration (p90 {fmt.duration(dur.p90_s)})"),
        _card(fmt.duration(dur.total_s), f"total instance time (max {fmt.duration(dur.max_s)})"),
    ]
    if head.binary:
        cards.insert(3, _card(fmt.pct(head.raw.pass_at_1), "pass@1"))
    if cost.carried_usd:
        cards.append(_card(fmt.usd(cost.carried_usd), "cost of carried results (ancestors)"))
    per = ""
    if by_benchmark:
        rows = "".join(
            f'<tr><td>{escape(name)}</td><td class="num">{h.selected}</td>'
            f'<td class="num">{fmt.score(h.raw.mean_score)}</td>'
            f'<td class="num">{fmt.count_rate(h.raw.resolved, h.raw.resolved_rate)}</td>'
            f'<td class="num">{h.infra_failed}</td></tr>'
            for name, h in by_benchmark.items()
        )
        per = (
            '<h3>By benchmark</h3><table class="metrics"><thead><tr><th>Benchmark</th>'
            '<th class="num">Selected</th><th class="num">Mean</th>'
            '<th class="num">Resolved</th><th class="num">Infra</th></tr></thead>'
            f"<tbody>{rows}</tbody></table>"
        )
    return (
        f'<section id="headline"><h2>Headline</h2><div class="cards">{"".join(cards)}</div>'
        f"{rates_table(head)}{per}</section>"
    )


def charts_section(figures: ReportFigures) -> str:
    results = figures.instances
    charts = [
        score_histogram(results),
        status_breakdown(figures.headline),
        per_instance_chart(
            "Duration per instance (s)",
            results,
            lambda r: None if r.carried else r.duration_s,
            fmt.duration,
        ),
        per_instance_chart(
            "Cost per instance (USD, known costs)",
            results,
            lambda r: r.cost_usd if r.cost_known and not r.carried else None,
            fmt.usd,
        ),
    ]
    return (
        f'<section id="charts"><h2>Charts</h2><div class="charts">{"".join(charts)}</div></section>'
    )


def summaries_section(figures: ReportFigures, texts: Mapping[str, str]) -> str:
    if not figures.official_summaries:
        return ""
    parts = []
    for s in figures.official_summaries:
        body = texts.get(s.path)
        content = (
            f"<pre>{escape(body)}</pre>" if body is not None else '<p class="muted">missing</p>'
        )
        parts.append(f"<h3>{escape(s.path)}</h3>{content}")
    return f'<section id="official"><h2>Official summary</h2>{"".join(parts)}</section>'


def _when(unix: float | None) -> str:
    if unix is None:
        return "not finished"
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def provenance_section(p: Provenance) -> str:
    dirty = "" if p.git_dirty is None else (" (dirty)" if p.git_dirty else " (clean)")
    items = [
        ("Run id", p.run_id),
        ("Run root", p.run_root),
        (
            "Benchmarks",
            ", ".join(f"{b} {p.benchmark_versions.get(b, '')}".strip() for b in p.benchmarks),
        ),
        ("Command", " ".join(p.argv)),
        ("Created", p.created_at),
        ("Finished", _when(p.finished_at_unix)),
        (
            "Outcome",
            f"{p.outcome} (exit {p.exit_code})"
            + (f", stop: {p.stop_reason}" if p.stop_reason else ""),
        ),
        ("Source", f"{p.git_head or 'unknown'} {p.git_branch or ''}{dirty}"),
        (
            "Versions",
            f"harness {p.harness_version}, python {p.python}, pytest {p.pytest}, {p.platform}",
        ),
        ("Config fingerprint", p.config_fingerprint or "none"),
        ("Workers", str(p.workers)),
        ("Shard", p.shard or "none"),
        ("Selection", p.selection_source),
        ("Dry run", "yes" if p.dry_run else "no"),
        ("Resumed from", ", ".join(p.resume_ancestors) or "none"),
    ]
    body = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in items)
    return f'<section id="provenance"><h2>Provenance</h2><dl class="prov">{body}</dl></section>'


def render_html(figures: ReportFigures, links: Links, summary_texts: Mapping[str, str]) -> str:
    p = figures.provenance
    warnings = "".join(f"<li>{escape(w)}</li>" for w in figures.warnings)
    outside = ""
    if figures.outside_selection:
        outside = (
            '<section id="outside"><h2>Rows outside the selection (not counted)</h2>'
            + instance_table(figures.outside_selection, links, "outside-table")
            + "</section>"
        )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>harness report {escape(p.run_id)}</title>"
        f"<style>{_asset('report.css')}</style></head><body>"
        f"<header><h1>Run {escape(p.run_id)}</h1>"
        f'<p class="sub">{escape(", ".join(p.benchmarks) or "no benchmark")} · '
        f"{escape(p.outcome)} · exit {escape(str(p.exit_code))} · "
        f"{figures.headline.selected} selected</p>"
        + (f'<p class="notice" id="subset-notice"><strong>{escape(p.subset_notice)}</strong></p>'
           if p.subset_notice else "")
        + (f'<p class="notice" id="not-reportable"><strong>not reportable:</strong> '
           f'{escape("; ".join(p.not_reportable))}</p>' if p.not_reportable else "")
        + "</header>"
        + (f'<ul class="warnings" id="warnings">{warnings}</ul>' if warnings else "")
        + headline_section(figures.headline, figures.by_benchmark)
        + (compare_section(figures.compare) if figures.compare else "")
        + charts_section(figures)
        + instance_section(figures.instances, links)
        + outside
        + summaries_section(figures, summary_texts)
        + provenance_section(p)
        + f"<script>{_asset('report.js')}</script></body></html>\n"
    )
