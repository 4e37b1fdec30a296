"""Table data for the HTML report: the paged instance table and the paired comparison.

The instance table is data, not markup: one compact JSON array per row, embedded in the
page and rendered a page at a time by ``report.js`` (a 10,000-row run keeps ~100 rows in
the DOM). The first page is also written as markup by the template, from the same rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from reports import fmt, samples_view
from reports.charts import status_color
from reports.figures import CompareReport, InstanceResult
from reports.model_use import models_cell, trouble_text

Links = Mapping[str, Sequence[tuple[str, str]]]
PAGE_SIZE = 100

# Row layout: positions in each row array.
KEY, STATUS = 0, 1
Cell = str | float | int | None
Row = list[Any]


class Column(BaseModel):
    """A column: header, kind (text|num|status|files), where its text and sort key are."""

    model_config = ConfigDict(frozen=True)

    label: str
    kind: str
    text: int  # index of the display text in the row array
    value: int | None = None  # index of the sort value (num, status); None: the text
    sortable: bool = True


INSTANCE_COLUMNS = [
    Column(label="Benchmark", kind="text", text=2),
    Column(label="Instance", kind="text", text=3),
    Column(label="Status", kind="status", text=1, value=1),
    Column(label="Reason", kind="text", text=4),
    Column(label="Score", kind="num", text=6, value=5),
    Column(label="Resolved", kind="text", text=7),
    Column(label="Tests", kind="num", text=9, value=8),
    Column(label="Cost", kind="num", text=11, value=10),
    Column(label="Duration", kind="num", text=13, value=12),
    Column(label="Attempt", kind="num", text=15, value=14),
    Column(label="Worker", kind="text", text=16),
    Column(label="Carried from", kind="text", text=17),
    Column(label="Files", kind="files", text=18, sortable=False),
]
# Shown when some row recorded the models it called (issue 24): the models, ⚠ when flagged.
MODELS_COLUMN = Column(label="Models", kind="text", text=19)


def instance_row(
    r: InstanceResult, links: Sequence[tuple[str, str]], *, models: bool = False
) -> Row:
    reason = r.reason_code or ""
    if r.error:
        reason = f"{reason}: {r.error}" if reason else r.error
    if r.rescored:  # which instances a rescore changed, and by which rule
        reason = f"{reason} ({r.rescored})" if reason else r.rescored
    if r.model_trouble:  # the provider pushed back (issue 45)
        trouble = f"model trouble: {trouble_text(r.model_trouble)}"
        reason = f"{reason} ({trouble})" if reason else trouble
    tests_v: float | None = None
    tests_text = ""
    if r.tests_total is not None:
        passed = r.tests_passed or 0
        tests_v = passed / r.tests_total if r.tests_total else 0.0
        tests_text = f"{passed}/{r.tests_total}"
    cost_v = r.cost_usd if r.cost_known else None
    return [
        r.key,
        r.status,
        r.benchmark,
        r.instance_id,
        reason,
        r.score,
        fmt.score(r.score) if r.attempted else "—",
        "yes" if r.resolved else "no",
        tests_v,
        tests_text,
        cost_v,
        fmt.usd(r.cost_usd) if r.cost_known else ("unknown" if r.attempted else ""),
        r.duration_s,
        fmt.duration(r.duration_s) if r.duration_s is not None else "",
        r.attempt,
        str(r.attempt) if r.attempt is not None else "",
        r.worker or "",
        r.carried_from or "",
        [list(link) for link in links],
        *([models_cell(r)] if models else []),
    ]


def instance_table(
    results: Sequence[InstanceResult], links: Links, table_id: str
) -> dict[str, Any]:
    """What the template and ``report.js`` need to show one paged instance table."""
    models = any(r.models is not None for r in results)
    columns = [*INSTANCE_COLUMNS, MODELS_COLUMN] if models else INSTANCE_COLUMNS
    rows = [instance_row(r, links.get(r.key, ()), models=models) for r in results]
    statuses = sorted({r.status for r in results})
    return {
        "id": table_id,
        "columns": columns,
        "rows": rows,
        "first_page": rows[:PAGE_SIZE],
        "pages": max(1, -(-len(rows) // PAGE_SIZE)),
        "statuses": statuses,
        "data": {
            "columns": [c.model_dump() for c in columns],
            "rows": rows,
            "colors": {s: status_color(s) for s in statuses},
            "pageSize": PAGE_SIZE,
        },
    }


COMPARE_HEADERS = [
    ("Instance", "text"),
    ("Change", "text"),
    ("Status A", "text"),
    ("Status B", "text"),
    ("Score A", "num"),
    ("Score B", "num"),
    ("Delta", "num"),
]


def compare_view(cmp: CompareReport) -> dict[str, Any]:
    """The comparison section's figures, formatted."""
    ci = cmp.bootstrap
    mc = cmp.mcnemar
    changed = [c for c in cmp.changes if c.change != "same"]
    return {
        "cmp": cmp,
        "headers": COMPARE_HEADERS,
        "changed": [
            {
                "key": c.key,
                "change": c.change,
                "status_a": c.status_a,
                "status_b": c.status_b,
                "color_a": status_color(c.status_a),
                "color_b": status_color(c.status_b),
                "cells": [
                    (c.score_a, fmt.score(c.score_a)),
                    (c.score_b, fmt.score(c.score_b)),
                    (c.delta, fmt.signed(c.delta)),
                ],
            }
            for c in changed
        ],
        "summary": [
            ("Baseline (A)", cmp.run_a.run_id),
            ("This run (B)", cmp.run_b.run_id),
            (
                "Shared instances",
                f"{cmp.shared} (only A: {len(cmp.only_a)}, only B: {len(cmp.only_b)})",
            ),
            ("Mean score A / B", f"{fmt.score(cmp.mean_a)} / {fmt.score(cmp.mean_b)}"),
            (
                "Mean difference B-A",
                f"{fmt.signed(ci.mean_diff)} [{fmt.signed(ci.low)}, {fmt.signed(ci.high)}] "
                f"({ci.level:.0%} bootstrap, {ci.resamples} resamples, seed {ci.seed})",
            ),
            ("Resolved A / B", f"{cmp.resolved_a} / {cmp.resolved_b}"),
            (
                "McNemar",
                f"b={mc.b} (A only), c={mc.c} (B only): exact p={mc.exact_p:.4g}; "
                f"χ² (cc)={mc.chi2:.3f}, p={mc.chi2_p:.4g}",
            ),
            *(
                [("Attempts", samples_view.attempts_text(cmp))]
                if cmp.attempts_per_task_a is not None
                else []
            ),
        ],
    }
