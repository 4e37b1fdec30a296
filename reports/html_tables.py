"""HTML tables: the sortable, filterable instance table and the paired comparison."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

from reports import fmt
from reports.charts import status_color
from reports.figures import CompareReport, InstanceResult

Links = Mapping[str, Sequence[tuple[str, str]]]


def _num(value: float | int | None, text: str) -> str:
    data = "" if value is None else repr(value)
    return f'<td class="num" data-v="{escape(data)}">{escape(text)}</td>'


def _txt(text: str | None) -> str:
    return f"<td>{escape(text or '')}</td>"


def status_badge(status: str) -> str:
    return f'<span class="status" style="background:{status_color(status)}">{escape(status)}</span>'


def _tests(r: InstanceResult) -> str:
    if r.tests_total is None:
        return _num(None, "")
    passed = r.tests_passed or 0
    ratio = passed / r.tests_total if r.tests_total else 0.0
    return _num(ratio, f"{passed}/{r.tests_total}")


def _files(links: Sequence[tuple[str, str]]) -> str:
    """The folder link, then the files folded in a ``<details>`` so rows stay one line."""
    folder = [(label, h) for label, h in links if label == "folder"]
    files = [(label, h) for label, h in links if label != "folder"]
    parts = [f'<a href="{escape(h)}">{escape(label)}</a>' for label, h in folder]
    if files:
        items = "".join(f'<a href="{escape(h)}">{escape(label)}</a>' for label, h in files)
        parts.append(f"<details><summary>{len(files)} files</summary>{items}</details>")
    return f'<td class="files">{"".join(parts)}</td>'


def instance_row(r: InstanceResult, links: Sequence[tuple[str, str]]) -> str:
    reason = r.reason_code or ""
    if r.error:
        reason = f"{reason}: {r.error}" if reason else r.error
    score_text = fmt.score(r.score) if r.attempted else "—"
    cost_text = fmt.usd(r.cost_usd) if r.cost_known else ("unknown" if r.attempted else "")
    return (
        f'<tr data-status="{escape(r.status)}" data-key="{escape(r.key)}">'
        f"{_txt(r.benchmark)}<td>{escape(r.instance_id)}</td>"
        f'<td data-v="{escape(r.status)}">{status_badge(r.status)}</td>'
        f"{_txt(reason)}"
        f"{_num(r.score, score_text)}"
        f"{_txt('yes' if r.resolved else 'no')}"
        f"{_tests(r)}"
        f"{_num(r.cost_usd if r.cost_known else None, cost_text)}"
        f"{_num(r.duration_s, fmt.duration(r.duration_s) if r.duration_s is not None else '')}"
        f"{_num(r.attempt, str(r.attempt) if r.attempt is not None else '')}"
        f"{_txt(r.worker)}{_txt(r.carried_from)}"
        f"{_files(links)}</tr>"
    )


INSTANCE_HEADERS = [
    ("Benchmark", "text"),
    ("Instance", "text"),
    ("Status", "text"),
    ("Reason", "text"),
    ("Score", "num"),
    ("Resolved", "text"),
    ("Tests", "num"),
    ("Cost", "num"),
    ("Duration", "num"),
    ("Attempt", "num"),
    ("Worker", "text"),
    ("Carried from", "text"),
    ("Files", ""),
]


def _head(headers: Sequence[tuple[str, str]]) -> str:
    cells = []
    for label, kind in headers:
        attrs = f' data-type="{kind}"' if kind else ""
        cls = ' class="num"' if kind == "num" else ""
        cells.append(f'<th{attrs}{cls} scope="col">{escape(label)}</th>')
    return f"<thead><tr>{''.join(cells)}</tr></thead>"


def instance_table(results: Sequence[InstanceResult], links: Links, table_id: str) -> str:
    rows = "".join(instance_row(r, links.get(r.key, ())) for r in results)
    return (
        f'<div class="scroll"><table id="{table_id}" class="sortable">{_head(INSTANCE_HEADERS)}'
        f"<tbody>{rows}</tbody></table></div>"
    )


def instance_section(results: Sequence[InstanceResult], links: Links) -> str:
    statuses = sorted({r.status for r in results})
    options = "".join(f'<option value="{escape(s)}">{escape(s)}</option>' for s in statuses)
    return (
        '<section id="instances"><h2>Instances</h2>'
        '<div class="controls">'
        '<label>Filter <input id="filter-text" type="search" '
        'placeholder="instance, status, reason..."></label>'
        f'<label>Status <select id="filter-status"><option value="">all</option>{options}'
        "</select></label>"
        f'<span id="shown-count" class="muted">{len(results)} of {len(results)} shown</span>'
        "</div>"
        f"{instance_table(results, links, 'instances-table')}</section>"
    )


COMPARE_HEADERS = [
    ("Instance", "text"),
    ("Change", "text"),
    ("Status A", "text"),
    ("Status B", "text"),
    ("Score A", "num"),
    ("Score B", "num"),
    ("Delta", "num"),
]


def compare_section(cmp: CompareReport) -> str:
    ci = cmp.bootstrap
    mc = cmp.mcnemar
    warnings = "".join(f"<li>{escape(w)}</li>" for w in cmp.warnings)
    changed = [c for c in cmp.changes if c.change != "same"]
    rows = "".join(
        f'<tr data-change="{c.change}"><td>{escape(c.key)}</td><td>{c.change}</td>'
        f"<td>{status_badge(c.status_a)}</td><td>{status_badge(c.status_b)}</td>"
        f"{_num(c.score_a, fmt.score(c.score_a))}{_num(c.score_b, fmt.score(c.score_b))}"
        f"{_num(c.delta, fmt.signed(c.delta))}</tr>"
        for c in changed
    )
    summary = (
        '<table class="metrics"><tbody>'
        f"<tr><th>Baseline (A)</th><td>{escape(cmp.run_a.run_id)}</td></tr>"
        f"<tr><th>This run (B)</th><td>{escape(cmp.run_b.run_id)}</td></tr>"
        f"<tr><th>Shared instances</th><td>{cmp.shared} (only A: {len(cmp.only_a)}, "
        f"only B: {len(cmp.only_b)})</td></tr>"
        f"<tr><th>Mean score A / B</th><td>{fmt.score(cmp.mean_a)} / {fmt.score(cmp.mean_b)}"
        "</td></tr>"
        f"<tr><th>Mean difference B-A</th><td>{fmt.signed(ci.mean_diff)} "
        f"[{fmt.signed(ci.low)}, {fmt.signed(ci.high)}] ({ci.level:.0%} bootstrap, "
        f"{ci.resamples} resamples, seed {ci.seed})</td></tr>"
        f"<tr><th>Resolved A / B</th><td>{cmp.resolved_a} / {cmp.resolved_b}</td></tr>"
        f"<tr><th>McNemar</th><td>b={mc.b} (A only), c={mc.c} (B only): exact p="
        f"{mc.exact_p:.4g}; χ² (cc)={mc.chi2:.3f}, p={mc.chi2_p:.4g}</td></tr>"
        "</tbody></table>"
    )
    return (
        '<section id="compare"><h2>Paired comparison</h2>'
        + (f'<ul class="warnings">{warnings}</ul>' if warnings else "")
        + summary
        + f"<h3>Changed instances ({len(changed)} of {cmp.shared})</h3>"
        + f'<table id="compare-table" class="sortable">{_head(COMPARE_HEADERS)}'
        + f"<tbody>{rows}</tbody></table></section>"
    )
