"""Instance pages opened in headless Chromium (Debian's ``chromium``): the timeline in the
agent's own order, the filter, nothing of the agent's runs as script, no request leaves the
page. Screenshots go to ``$HARNESS_TEST_ARTIFACTS/reports/`` (default: pytest's temporary
folder)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reports.write import write_report
from tests.reports.test_report_browser import artifacts_dir
from tests.reports.viewer_runs import gateway_events, trajectory

pytestmark = pytest.mark.slow  # a real browser (the slow tier holds every browser test)

EVIL = "<script>alert(1)</script><img src=x onerror=alert(2)>"


def open_page(browser: Any, path: Path) -> tuple[Any, list[str]]:
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: problems.append(str(exc)))

    def dialog(d: Any) -> None:  # an alert() of the agent's would open one
        problems.append(f"dialog: {d.message}")
        d.dismiss()

    page.on("dialog", dialog)
    page.on("request", lambda r: problems.append(f"request {r.url}")
            if not r.url.startswith("file://") else None)
    page.goto(path.as_uri())
    return page, problems


def test_instance_pages_in_chromium(make_run, make_row, browser, tmp_path_factory) -> None:
    commands = [("ls", 0, "x"), (f"echo '{EVIL}'", 0, EVIL), ("make test", 2, "1 failed")]
    rows = [make_row("pb/mini", output_paths={"trajectory": "pb/mini/traj.json"}),
            make_row("pb/gw", output_paths={"gateway_events": "pb/gw/events.jsonl"})]
    root = make_run("browser", rows)
    (root / "pb" / "mini" / "traj.json").write_text(json.dumps(trajectory(commands)))
    (root / "pb" / "gw" / "events.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in gateway_events(3)))
    paths = write_report(root)
    shots = artifacts_dir(tmp_path_factory)
    shots.mkdir(parents=True, exist_ok=True)

    page, problems = open_page(browser, paths.output_dir / "instances" / "pb__mini.html")
    kinds = page.eval_on_selector_all("#timeline tbody tr", "rs => rs.map(r => r.cells[2]"
                                      ".firstChild.textContent.trim())")
    steps = page.eval_on_selector_all("#timeline tbody tr td code",
                                      "cs => cs.map(c => c.textContent)")
    assert kinds == ["event", "event", "model", "command", "model", "command", "model",
                     "command"]
    assert [s for s in steps if not s.startswith(("model", "system", "user"))] == [
        c for c, _, _ in commands]  # the commands in the agent's order, EVIL as text
    page.fill("#filter", "make")
    assert page.inner_text("#shown") == "1"
    page.screenshot(path=str(shots / "instance-mini.png"), full_page=True)
    assert problems == []
    page.close()

    page, problems = open_page(browser, paths.output_dir / "report.html")
    page.click("tr[data-key='pb/gw'] a:text('steps')")
    page.wait_for_selector("#timeline")
    statuses = page.eval_on_selector_all("#timeline tbody tr.k-command td.status",
                                         "cs => cs.map(c => c.firstChild.textContent)")
    assert statuses == ["exit 0", "exit 0", "exit 2"]
    page.screenshot(path=str(shots / "instance-gateway.png"), full_page=True)
    assert problems == []
    page.close()
