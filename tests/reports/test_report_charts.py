"""Every chart in the report has a title and labels on both axes, and stays small."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest

from reports.charts import MAX_BARS
from reports.write import write_report
from tests.reports.report_runs import big_run_rows, scratch_tree, write_run


class ChartCollector(HTMLParser):
    """Per ``<svg class="chart">``: its <title>, its texts by class, its bar count."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: list[dict[str, list[str]]] = []
        self.stack: list[str] = []
        self.text_class: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "svg" and a.get("class") == "chart":
            self.charts.append({"title": [], "rect": [], "aria": [a.get("aria-label") or ""]})
        if not self.charts or tag == "svg":
            self.stack.append(tag)
            return
        self.stack.append(tag)
        if tag == "rect":
            self.charts[-1]["rect"].append("")
        if tag == "text":
            self.text_class = a.get("class") or ""

    def handle_endtag(self, tag: str) -> None:
        self.stack.pop()
        self.text_class = None

    def handle_data(self, data: str) -> None:
        if not self.charts or not self.stack:
            return
        chart = self.charts[-1]
        if self.stack[-2:] == ["svg", "title"]:
            chart["title"].append(data)
        elif self.stack[-1] == "text" and self.text_class is not None:
            chart.setdefault(self.text_class, []).append(data)


def charts_of(html: str) -> list[dict[str, list[str]]]:
    collector = ChartCollector()
    collector.feed(html)
    return collector.charts


def assert_labelled(charts: list[dict[str, list[str]]]) -> None:
    assert len(charts) == 4
    for chart in charts:
        title = "".join(chart["title"])
        assert title and chart["aria"] == [title]
        assert chart["chart-title"] == [title]  # drawn, not only in the tooltip
        assert [t.strip() for t in chart["axis-label x-label"]] != [""]
        assert [t.strip() for t in chart["axis-label y-label"]] != [""]


def test_every_chart_has_a_title_and_axis_labels(programbench_run: Path) -> None:
    charts = charts_of(write_report(programbench_run).html.read_text())
    assert_labelled(charts)
    by_title = {"".join(c["title"]): c for c in charts}
    duration = by_title["Duration per instance (s)"]
    assert duration["axis-label y-label"] == ["duration"]
    assert duration["axis-label x-label"] == ["instances, largest first"]
    assert by_title["Status breakdown (selected instances)"]["axis-label y-label"] == ["status"]
    assert by_title["Score distribution (instances per score band)"]["axis-label x-label"] == [
        "score band"
    ]


def test_an_empty_run_still_labels_its_charts(make_run, make_row) -> None:
    root = make_run("empty", [make_row("pb/a", status="failed", score=None)])
    charts = charts_of(write_report(root).html.read_text())
    assert_labelled(charts)
    assert "no data" in "".join(
        "".join(c.get("muted", [])) for c in charts
    )  # no durations, no costs


def test_per_instance_charts_group_many_instances(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with scratch_tree(tmp_path_factory) as base:
        root = write_run(base / "run", big_run_rows(1_000))
        charts = charts_of(write_report(root).html.read_text())
    assert_labelled(charts)
    by_title = {"".join(c["title"]): c for c in charts}
    cost = by_title["Cost per instance (USD, known costs)"]
    assert len(cost["rect"]) == MAX_BARS
    assert cost["axis-label x-label"] == ["instances, largest first (880 in 200 groups)"]
