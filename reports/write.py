"""Write a run's report: ``report.html``, ``report.md`` and ``report.json`` (the figures)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.core.fsutil import atomic_write_text
from reports.build import build_figures, compare_runs, read_summary
from reports.errors import ReportInputError
from reports.figures import ReportFigures
from reports.html import render_html
from reports.links import instance_links
from reports.markdown import render_markdown
from reports.run import load_run
from reports.stats import DEFAULT_RESAMPLES
from reports.viewer.page import write_pages

REPORT_DIR = "report"
HTML_NAME = "report.html"
MARKDOWN_NAME = "report.md"
FIGURES_NAME = "report.json"


@dataclass(frozen=True)
class ReportPaths:
    output_dir: Path
    html: Path
    markdown: Path
    figures: Path


def report_paths(output_dir: Path) -> ReportPaths:
    return ReportPaths(
        output_dir=output_dir,
        html=output_dir / HTML_NAME,
        markdown=output_dir / MARKDOWN_NAME,
        figures=output_dir / FIGURES_NAME,
    )


def check_writable(paths: ReportPaths, *, overwrite: bool) -> None:
    """Refuse before anything is written: never replace a report unless asked to."""
    if paths.output_dir.exists() and not paths.output_dir.is_dir():
        raise ReportInputError(
            f"{paths.output_dir} exists and is not a directory; pass --output with a folder path"
        )
    if overwrite:
        return
    for path in (paths.html, paths.markdown, paths.figures):
        if path.exists():
            raise ReportInputError(
                f"{path} already exists; pass --output DIR to write elsewhere, "
                f"or --force to replace it"
            )


def figures_json(figures: ReportFigures) -> str:
    return figures.model_dump_json(by_alias=True, indent=2) + "\n"


def write_report(
    run_root: Path | str,
    output_dir: Path | str | None = None,
    compare_to: Path | str | None = None,
    *,
    overwrite: bool = False,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> ReportPaths:
    """Render the report of ``run_root`` into ``output_dir`` (default ``<run_root>/report``).

    ``compare_to`` is a baseline run: the report then shows this run minus the baseline.
    Raises :class:`ReportInputError` (nothing written) on a bad run root, a corrupt ledger
    or an existing report when ``overwrite`` is false.
    """
    root = Path(run_root)
    run = load_run(root)
    baseline = load_run(Path(compare_to)) if compare_to is not None else None
    out = Path(output_dir) if output_dir is not None else root / REPORT_DIR
    paths = report_paths(out)
    check_writable(paths, overwrite=overwrite)

    compare = compare_runs(baseline, run, resamples=resamples, seed=seed) if baseline else None
    figures = build_figures(run, compare, resamples=resamples, seed=seed)
    root_real, out_real = root.resolve(), out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    # each unit's page (issue 46): its steps, its verdict, its attempts side by side
    pages = write_pages(run, out, compare_out=Path(compare_to).resolve() / REPORT_DIR
                        if compare_to is not None else None)
    links = {
        r.key: [*([("steps", pages[r.key])] if r.key in pages else []),
                *instance_links(root_real, r, out_real)]
        for r in [*figures.instances, *figures.outside_selection]
    }
    texts = {
        s.path: text
        for s in figures.official_summaries
        if (text := read_summary(root, s.path)) is not None
    }
    html = render_html(figures, links, texts)
    markdown = render_markdown(figures, texts)

    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(paths.figures, figures_json(figures))
    atomic_write_text(paths.markdown, markdown)
    atomic_write_text(paths.html, html)
    return paths
