"""report.html / report.md / report.json as written to disk."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest

from harness.core.fsutil import atomic_write_json, read_json
from reports.errors import ReportInputError
from reports.figures import ReportFigures
from reports.write import write_report


class LinkCollector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.srcs: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        for name, value in attrs:
            if name == "href" and value is not None:
                self.hrefs.append(value)
            if name == "src" and value is not None:
                self.srcs.append(value)


def parse(html: str) -> LinkCollector:
    collector = LinkCollector()
    collector.feed(html)
    return collector


def test_figures_are_byte_identical_when_regenerated(
    programbench_run: Path, tmp_path: Path
) -> None:
    first = write_report(programbench_run, tmp_path / "one")
    second = write_report(programbench_run, tmp_path / "two")
    third = write_report(programbench_run, tmp_path / "one", overwrite=True)
    data = first.figures.read_bytes()
    assert data == second.figures.read_bytes() == third.figures.read_bytes()
    assert first.markdown.read_bytes() == second.markdown.read_bytes()
    ReportFigures.model_validate_json(data)


def test_default_output_is_run_root_report(programbench_run: Path) -> None:
    paths = write_report(programbench_run)
    assert paths.output_dir == programbench_run / "report"
    assert {p.name for p in paths.output_dir.iterdir()} == {
        "report.html",
        "report.md",
        "report.json",
        "instances",  # a page per unit with a row (issue 46)
    }
    from reports.run import load_run

    run = load_run(programbench_run)
    pages = {p.name for p in (paths.output_dir / "instances").iterdir()}
    assert pages == {r.key.replace("/", "__") + ".html" for r in run.results if r.key in run.rows}
    assert len(pages) == 7  # the 9 selected, less the 2 never attempted


def test_existing_report_is_never_overwritten(programbench_run: Path) -> None:
    paths = write_report(programbench_run)
    before = {p: p.read_bytes() for p in (paths.html, paths.markdown, paths.figures)}
    ledger = programbench_run / "result_index.jsonl"
    ledger.write_text(ledger.read_text() + ledger.read_text().splitlines(keepends=True)[0])
    with pytest.raises(ReportInputError, match=r"report\.html already exists.*--force"):
        write_report(programbench_run)
    assert {p: p.read_bytes() for p in before} == before


def test_html_is_self_contained_and_links_resolve(programbench_run: Path, tmp_path: Path) -> None:
    for out in (programbench_run / "report", tmp_path / "elsewhere" / "deep"):
        paths = write_report(programbench_run, out)
        page = parse(paths.html.read_text())
        assert page.srcs == []  # no external script, image or frame
        assert "link" not in page.tags  # no external stylesheet
        assert not [h for h in page.hrefs if re.match(r"^[a-z]+:", h)]  # relative only
        agent_logs = [h for h in page.hrefs if h.endswith("agent.log")]
        assert len(agent_logs) == 7  # one per instance with a folder
        for href in agent_logs:
            target = (paths.output_dir / unquote(href)).resolve()
            assert target.is_file()
            assert target.is_relative_to(programbench_run.resolve())


def test_every_selected_instance_is_listed(programbench_run: Path, programbench_missing) -> None:
    html = write_report(programbench_run).html.read_text()
    body = html.split('id="instances-table"', 1)[1].split("</table>", 1)[0]
    keys = re.findall(r'data-key="([^"]+)"', body)
    manifest = read_json(programbench_run / "run_manifest.json")
    assert sorted(keys) == sorted(manifest["selection"]["instance_ids"])
    for key in programbench_missing:
        assert f'<tr data-status="not_attempted" data-key="{key}">' in body


def test_official_summaries_are_shown(programbench_run: Path) -> None:
    manifest = read_json(programbench_run / "run_manifest.json")
    manifest["extra"]["official_summaries"] += ["official/eval_summary.txt", "../etc/passwd.txt"]
    atomic_write_json(programbench_run / "run_manifest.json", manifest)
    (programbench_run / "official").mkdir()
    (programbench_run / "official" / "eval_summary.txt").write_text("Average 0.42 <b>\n")
    paths = write_report(programbench_run)
    html, md = paths.html.read_text(), paths.markdown.read_text()
    assert "Average  63.7%" in html and "Average  63.7%" in md  # programbench_info.txt
    assert "Average 0.42 &lt;b&gt;" in html  # escaped, not markup
    figures = ReportFigures.model_validate_json(paths.figures.read_bytes())
    assert [s.path for s in figures.official_summaries] == [
        "programbench_info.txt",
        "official/eval_summary.txt",
    ]
    assert any("../etc/passwd.txt" in w for w in figures.warnings)


def test_markdown_headline(programbench_run: Path) -> None:
    md = write_report(programbench_run).markdown.read_text()
    assert "| Mean score | 0.391 | 0.587 |" in md
    assert "| Resolved | 1 (11.1%) | 1 (16.7%) |" in md
    assert "With a verdict (÷ 6; 3 excluded: " in md and "not_attempted 2" in md
    assert "**Status:** completed 5 · not_attempted 2 · failed 1 · infra_failed 1" in md


def test_report_with_comparison(make_run, make_row, tmp_path: Path) -> None:
    base = make_run("base", [make_row("pb/a", "A", score=0.0), make_row("pb/b", "A", score=1.0)])
    new = make_run("new", [make_row("pb/a", "B", score=1.0), make_row("pb/b", "B", score=1.0)])
    paths = write_report(new, compare_to=base, resamples=200)
    figures = ReportFigures.model_validate_json(paths.figures.read_bytes())
    assert figures.compare is not None
    assert (figures.compare.run_a.run_id, figures.compare.run_b.run_id) == ("A", "B")
    assert figures.compare.mcnemar.c == 1
    assert 'id="compare-table"' in paths.html.read_text()
    assert "Compared with `A` (A) → `B` (B)" in paths.markdown.read_text()


def test_many_files_are_capped_and_text_is_escaped(make_run, make_row) -> None:
    bad = make_row("pb/x", status="failed", error="<script>alert(1)</script> & more")
    root = make_run("many", [bad])
    for n in range(30):
        (root / "pb" / "x" / f"f{n:02d}.txt").write_text("x")
    html = write_report(root).html.read_text()
    row = html.split('data-key="pb/x"', 1)[1].split("</tr>", 1)[0]
    # its steps page (issue 46), its folder, 20 files (agent.log, f00..f18), more
    assert row.count("<a ") == 1 + 1 + 20 + 1
    assert 'href="instances/pb__x.html">steps</a>' in row
    assert "more files…" in row
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in row
