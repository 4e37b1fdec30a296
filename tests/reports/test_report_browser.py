"""The HTML report of a real run, opened in headless Chromium (Debian's ``chromium``).

The screenshot is saved to ``$HARNESS_TEST_ARTIFACTS/reports/report.png`` (default: the
session's pytest temporary folder, never the source tree) and its path printed, so a failing
CI run leaves something to look at.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from harness.core.fsutil import read_json
from reports.write import write_report


def artifacts_dir(factory: pytest.TempPathFactory) -> Path:
    root = os.environ.get("HARNESS_TEST_ARTIFACTS")
    return (Path(root) if root else factory.getbasetemp()) / "reports"


def visible_column(page: Any, index: int) -> list[str]:
    return page.eval_on_selector_all(
        "#instances-table tbody tr:not([hidden])",
        f"rows => rows.map(r => r.cells[{index}].getAttribute('data-v') ?? r.cells[{index}].textContent.trim())",
    )


@pytest.mark.slow
def test_report_in_a_browser(
    real_run_root: Path, browser: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    artifacts = artifacts_dir(tmp_path_factory)
    html = real_run_root / "report" / "report.html"
    assert html.is_file(), "the runner writes the report at session end"
    paths = write_report(real_run_root, real_run_root / "report-again")
    assert (paths.figures.read_bytes()
            == (real_run_root / "report" / "report.json").read_bytes())
    selection = read_json(real_run_root / "run_manifest.json")["selection"]["instance_ids"]
    ids = sorted(key.split("/", 1)[1] for key in selection)
    assert len(ids) == 9

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    problems: list[str] = []
    page.on(
        "console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None
    )
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(paths.html.as_uri())

    # Every selected instance is listed.
    assert sorted(visible_column(page, 1)) == ids
    assert page.inner_text("#shown-count") == f"{len(ids)} of {len(ids)} shown"

    # Sorting: click Score once (ascending), again (descending).
    page.click("#instances-table th:has-text('Score')")
    ascending = [float(v) for v in visible_column(page, 4)]
    assert ascending == sorted(ascending) and ascending[0] == 0.0
    assert page.get_attribute("#instances-table th:has-text('Score')", "aria-sort") == "ascending"
    page.click("#instances-table th:has-text('Score')")
    descending = [float(v) for v in visible_column(page, 4)]
    assert descending == sorted(ascending, reverse=True) and descending[0] == 1.0
    page.click("#instances-table th:has-text('Instance')")
    assert visible_column(page, 1) == ids

    # Filtering: free text, then status.
    page.fill("#filter-text", "ok-")
    assert visible_column(page, 1) == ["ok-0000", "ok-0001", "ok-0002"]
    assert page.inner_text("#shown-count") == f"3 of {len(ids)} shown"
    page.fill("#filter-text", "")
    page.select_option("#filter-status", "infra_failed")
    assert visible_column(page, 1) == ["docker"]
    page.select_option("#filter-status", "")
    assert len(visible_column(page, 1)) == len(ids)

    # The headline shows the selection as denominator, and beside it the units with a
    # verdict, the excluded one named by its reason (issue 45: neither without the other).
    headline = page.inner_text("#headline-table")
    assert "÷ 9 selected" in headline and "With a verdict (÷ 8; 1 excluded: " in headline

    # Instance links resolve to files of the run.
    row = "#instances-table tbody tr[data-key='selftest/half']"
    page.click(f"{row} .files summary")
    link = page.locator(f"{row} .files details a[href$='selftest_task_body.json']")
    assert link.is_visible()
    href = link.get_attribute("href")
    assert href is not None
    assert (paths.output_dir / href).resolve().is_file()

    artifacts.mkdir(parents=True, exist_ok=True)
    shot = artifacts / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    shutil.copy(paths.html, artifacts / "report.html")
    print(f"report screenshot: {shot}")

    assert problems == []
    assert [u for u in requests if not u.startswith(("file:", "data:"))] == []
    page.close()
