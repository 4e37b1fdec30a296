"""A 10,000-row run: the report stays small and its instance table pages and filters.

The instance table is rendered a page at a time from JSON embedded in the page; only the
first page exists as markup. Timing lives in ``tests/perf/test_report_perf.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from reports.figures import ReportFigures
from reports.html_tables import PAGE_SIZE
from reports.write import ReportPaths, write_report
from tests.reports.report_runs import big_run_rows, scratch_tree, write_run

# The slow tier: a 10,000-row report, and a real browser (Chromium) on it.
pytestmark = pytest.mark.slow

ROWS = 10_000
MAX_BYTES = 5 * 1024 * 1024


@pytest.fixture(scope="module")
def big_report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReportPaths]:
    with scratch_tree(tmp_path_factory) as base:
        yield write_report(write_run(base / "run", big_run_rows(ROWS)))


def keys(page: Any) -> list[str]:
    return page.eval_on_selector_all(
        "#instances-table tbody tr", "rows => rows.map(r => r.getAttribute('data-key'))"
    )


def iid(n: int) -> str:
    return f"programbench/inst-{n:05d}"


def test_a_10k_row_report_is_small_and_holds_every_row_as_data(big_report: ReportPaths) -> None:
    html = big_report.html.read_text(encoding="utf-8")
    assert len(html.encode()) < MAX_BYTES
    table = html.split('id="instances-table"', 1)[1].split("</table>", 1)[0]
    assert table.count("<tr data-status=") == PAGE_SIZE  # only the first page as markup
    data = html.split('<script type="application/json" id="instances-table-data">', 1)[1]
    rows = json.loads(data.split("</script>", 1)[0])["rows"]
    assert [r[0] for r in rows] == [iid(n) for n in range(ROWS)]


def test_a_10k_row_report_pages_sorts_and_filters(big_report: ReportPaths, browser: Any) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.goto(big_report.html.as_uri())
    page.wait_for_selector("#instances-table[data-page='1']")

    assert page.eval_on_selector_all("#instances-table tr", "rows => rows.length") == 1 + PAGE_SIZE
    assert keys(page) == [iid(n) for n in range(PAGE_SIZE)]
    assert page.inner_text("#shown-count") == f"{ROWS} of {ROWS} shown"
    assert page.inner_text("#instances-table-pager .page-info") == "page 1 of 100"

    page.click("#instances-table-pager button[data-step='1']")
    assert keys(page) == [iid(n) for n in range(PAGE_SIZE, 2 * PAGE_SIZE)]
    assert page.inner_text("#instances-table-pager .page-info") == "page 2 of 100"

    # Free text across all 10,000 rows, not only the page shown; back to page 1.
    page.fill("#filter-text", "inst-0999")
    assert keys(page) == [iid(n) for n in range(9990, 10_000)]
    assert page.inner_text("#shown-count") == f"10 of {ROWS} shown"
    assert page.is_hidden("#instances-table-pager") is False
    assert page.inner_text("#instances-table-pager .page-info") == "page 1 of 1"

    # Status: every 25th row is infra_failed (400 rows, 4 pages); the last page ends the list.
    page.fill("#filter-text", "")
    page.select_option("#filter-status", "infra_failed")
    infra = [iid(n) for n in range(0, ROWS, 25)]
    assert page.inner_text("#shown-count") == f"{len(infra)} of {ROWS} shown"
    assert keys(page) == infra[:PAGE_SIZE]
    for _ in range(3):
        page.click("#instances-table-pager button[data-step='1']")
    assert keys(page) == infra[3 * PAGE_SIZE :]
    assert page.is_disabled("#instances-table-pager button[data-step='1']")

    # Sorting sorts every row: Score descending puts the 1.0 rows first, filter kept.
    page.select_option("#filter-status", "")
    page.click("#instances-table th:has-text('Score')")
    page.click("#instances-table th:has-text('Score')")
    scores = page.eval_on_selector_all(
        "#instances-table tbody tr", "rows => rows.map(r => Number(r.cells[4].dataset.v))"
    )
    figures = ReportFigures.model_validate_json(big_report.figures.read_bytes())
    every = sorted((r.score for r in figures.instances), reverse=True)
    assert scores == every[:PAGE_SIZE] and scores[0] == 1.0 and scores[-1] < 1.0
    page.click("#instances-table-pager button[data-step='1']")
    assert page.eval_on_selector_all(
        "#instances-table tbody tr", "rows => rows.map(r => Number(r.cells[4].dataset.v))"
    ) == every[PAGE_SIZE : 2 * PAGE_SIZE]
    assert problems == []
    page.close()


def test_script_renders_the_same_rows_as_the_markup(big_report: ReportPaths, browser: Any) -> None:
    """The first page written by the template and the one report.js draws are the same."""
    cells = "rows => rows.map(r => r.outerHTML.replace(/ style=\"[^\"]*\"/g, ''))"
    static = browser.new_context(java_script_enabled=False).new_page()
    static.goto(big_report.html.as_uri())
    scripted = browser.new_page()
    scripted.goto(big_report.html.as_uri())
    scripted.wait_for_selector("#instances-table[data-page='1']")
    assert re.sub(r"\s+", " ", static.inner_text("#instances-table")) == re.sub(
        r"\s+", " ", scripted.inner_text("#instances-table")
    )
    assert static.eval_on_selector_all("#instances-table tbody tr", cells) == (
        scripted.eval_on_selector_all("#instances-table tbody tr", cells)
    )
    static.close()
    scripted.close()


def test_run_text_is_shown_as_text_never_run(make_run, make_row, browser: Any) -> None:
    """Markup in ledger fields (embedded as JSON, drawn by script) stays text in both paths."""
    evil = "</script><script>window.pwned = 1</script><img src=x onerror='window.pwned=2'>"
    root = make_run("evil", [make_row("pb/x", status="failed", error=evil, worker=evil)])
    html = write_report(root).html
    for enabled in (False, True):
        context = browser.new_context(java_script_enabled=enabled)
        page = context.new_page()
        page.goto(html.as_uri())
        if enabled:
            page.wait_for_selector("#instances-table[data-page='1']")
            assert page.evaluate("window.pwned") is None
        row = page.locator("#instances-table tbody tr[data-key='pb/x']")
        assert row.locator("td").nth(3).inner_text() == evil
        assert row.locator("td").nth(10).inner_text() == evil
        assert page.locator("#instances-table img").count() == 0
        context.close()
