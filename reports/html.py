"""The self-contained HTML run report: inline CSS, inline JS, inline SVG, no network.

Rendered by jinja2 with autoescape on: every run-derived string is escaped by the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from harness.run.samples import SampleStats
from reports import fmt, samples_view
from reports.charts import Chart, per_instance_chart, score_histogram, status_breakdown
from reports.figures import Headline, ModelUse, Provenance, ReportFigures
from reports.html_tables import Links, compare_view, instance_table
from reports.model_use import trouble_text

ASSETS = Path(__file__).resolve().parent / "assets"
TEMPLATE = "report.html.j2"


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(ASSETS),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["data_v"] = data_v
    # Compact JSON for the embedded table data (``tojson`` escapes <, >, & and ').
    env.policies["json.dumps_kwargs"] = {"separators": (",", ":"), "ensure_ascii": False}
    return env


def data_v(value: float | int | str | None) -> str:
    """A cell's sort key as ``report.js`` writes it (JavaScript's ``String(number)``)."""
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


def _asset(name: str) -> str:
    return (ASSETS / name).read_text(encoding="utf-8")


def headline_cards(head: Headline) -> list[tuple[str, str]]:
    cost = head.cost
    dur = head.duration
    cards = [
        (fmt.score(head.raw.mean_score), "mean score (missing = 0)"),
        (fmt.count_rate(head.raw.resolved, head.raw.resolved_rate), "resolved"),
        (fmt.count_rate(head.raw.near_resolved, head.raw.near_resolved_rate), "near-resolved"),
        (str(head.selected), "selected"),
        (str(head.attempted), "attempted"),
        (str(head.not_attempted), "not attempted"),
        (str(head.infra_failed), "infra_failed"),
        (str(head.carried), "carried forward"),
        (
            fmt.usd(cost.known_usd) if cost.known_rows else "unknown",
            f"cost known ({cost.known_rows} rows)",
        ),
        (str(cost.unknown_rows), "rows with unknown cost"),
        (fmt.duration(dur.median_s), f"median duration (p90 {fmt.duration(dur.p90_s)})"),
        (fmt.duration(dur.total_s), f"total instance time (max {fmt.duration(dur.max_s)})"),
    ]
    if head.binary:
        cards.insert(3, (fmt.pct(head.raw.pass_at_1), "pass@1"))
    if cost.carried_usd:
        cards.append((fmt.usd(cost.carried_usd), "cost of carried results (ancestors)"))
    return cards


def rates_rows(head: Headline) -> list[tuple[str, str, str]]:
    raw, ex = head.raw, head.with_verdict
    return [
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


def by_benchmark_rows(by_benchmark: Mapping[str, Headline]) -> list[list[str]]:
    return [
        [
            name,
            str(h.selected),
            fmt.score(h.raw.mean_score),
            fmt.count_rate(h.raw.resolved, h.raw.resolved_rate),
            str(h.infra_failed),
        ]
        for name, h in by_benchmark.items()
    ]


def charts(figures: ReportFigures) -> list[Chart]:
    results = figures.instances
    return [
        score_histogram(results),
        status_breakdown(figures.headline),
        per_instance_chart(
            "Duration per instance (s)",
            results,
            lambda r: None if r.carried else r.duration_s,
            fmt.duration,
            y_label="duration",
        ),
        per_instance_chart(
            "Cost per instance (USD, known costs)",
            results,
            lambda r: r.cost_usd if r.cost_known and not r.carried else None,
            fmt.usd,
            y_label="cost (USD)",
        ),
    ]


def samples_context(stats: SampleStats) -> dict[str, Any]:
    """The repeated-attempt section: figures, pass@k and every unstable task."""
    return {
        "figures": samples_view.summary_items(stats),
        "pass_headers": samples_view.PASS_HEADERS,
        "pass_rows": samples_view.pass_rows(stats),
        "unstable_headers": samples_view.UNSTABLE_HEADERS,
        "unstable_rows": samples_view.unstable_rows(stats),
    }


def models_context(use: ModelUse) -> dict[str, Any]:
    return {
        "note": samples_view.models_note(use),
        "headers": samples_view.MODEL_HEADERS,
        "rows": samples_view.model_rows(use),
        "flagged": [(f.key, f.flag) for f in use.flagged],
        "trouble": (f"{use.trouble['rows']:g} row(s) met the provider's pushback: "
                    f"{trouble_text(use.trouble)}") if use.trouble else None,
    }


def _when(unix: float | None) -> str:
    if unix is None:
        return "not finished"
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def provenance_items(p: Provenance) -> list[tuple[str, str]]:
    dirty = "" if p.git_dirty is None else (" (dirty)" if p.git_dirty else " (clean)")
    return [
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


def context(
    figures: ReportFigures, links: Links, summary_texts: Mapping[str, str]
) -> dict[str, Any]:
    """Everything the template shows, computed and formatted here (the template only lays out)."""
    head = figures.headline
    return {
        "p": figures.provenance,
        "selected": head.selected,
        "warnings": figures.warnings,
        "cards": headline_cards(head),
        "rates": rates_rows(head),
        "raw_denominator": head.raw.denominator,
        "ex_denominator": head.with_verdict.denominator,
        "ex_note": fmt.excluded_note(head.excluded_reasons),
        "by_benchmark": by_benchmark_rows(figures.by_benchmark),
        "compare": compare_view(figures.compare) if figures.compare else None,
        "samples": samples_context(figures.samples) if figures.samples is not None else None,
        "models": models_context(figures.models) if figures.models is not None else None,
        "charts": charts(figures),
        "instances": instance_table(figures.instances, links, "instances-table"),
        "outside": (
            instance_table(figures.outside_selection, links, "outside-table")
            if figures.outside_selection
            else None
        ),
        "summaries": [(s.path, summary_texts.get(s.path)) for s in figures.official_summaries],
        "provenance": provenance_items(figures.provenance),
        "css": _asset("report.css"),
        "js": _asset("report.js"),
    }


def render_html(figures: ReportFigures, links: Links, summary_texts: Mapping[str, str]) -> str:
    template = environment().get_template(TEMPLATE)
    return template.render(context(figures, links, summary_texts))
