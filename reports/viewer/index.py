"""``harness report --index DIR``: one static page over every run root under DIR: the runs
(headline, model, agent, date) and a task-by-run matrix of scores, linking into each run's
report and instance pages."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from harness.core.fsutil import atomic_write_text
from harness.run.ledger import ledger_path, read_ledger
from harness.run.manifest import MANIFEST_NAME, ManifestError, read_manifest
from reports.errors import ReportInputError
from reports.viewer.page import PAGES_DIR, page_name, task_of
from reports.write import HTML_NAME, REPORT_DIR

MAX_DEPTH = 3
MAX_MANIFEST = 64 << 20
MAX_LEDGER = 1 << 30


@dataclass
class RunColumn:
    run_id: str
    href: str | None  # its report.html, when written
    created: str
    benchmarks: str
    agent: str
    model: str
    selected: int
    mean: str
    scores: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # task -> (score,
    # the unit's page)


def find_runs(top: Path) -> list[Path]:
    """Run roots under ``top`` (a folder with ``run_manifest.json``), not inside another."""
    out: list[Path] = []

    def walk(folder: Path, depth: int) -> None:
        if (folder / MANIFEST_NAME).is_file():
            out.append(folder)
            return
        if depth >= MAX_DEPTH:
            return
        try:
            children = sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink())
        except OSError:
            return
        for child in children:
            walk(child, depth + 1)

    walk(top, 0)
    return out


def _readable(path: Path, limit: int) -> bool:
    """A regular file, not a link, of at most ``limit`` bytes (a manifest or a ledger linked
    to a device, or grown past reason, is not read)."""
    try:
        st = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size <= limit


def _href(target: Path, out_dir: Path) -> str:
    return quote(os.path.relpath(target, out_dir))  # a folder named "javascript:x" stays a path


def _column(root: Path, out_dir: Path) -> RunColumn | None:
    """A run's column; None for a root that cannot be read (it is left out, never the
    index's end)."""
    try:
        return _read_column(root, out_dir)
    except Exception:  # any hostile root is skipped
        return None


def _read_column(root: Path, out_dir: Path) -> RunColumn | None:
    if not _readable(root / MANIFEST_NAME, MAX_MANIFEST):
        return None
    try:
        m = read_manifest(root)
    except ManifestError:
        return None
    report = root / REPORT_DIR / HTML_NAME
    cfg: dict[str, Any] = m.config or {}
    col = RunColumn(
        run_id=m.run_id, href=_href(report, out_dir) if report.is_file() else None,
        created=(m.created_at or "")[:16].replace("T", " "), benchmarks=", ".join(m.benchmarks),
        agent=str(cfg.get("agent.kind") or "-"), model=str(cfg.get("agent.solve_model") or "-"),
        selected=m.selection.count,
        mean=f"{m.mean_score:.3f}" if m.mean_score is not None else "-")
    ledger = ledger_path(root)
    rows = read_ledger(ledger).latest if _readable(ledger, MAX_LEDGER) else {}
    by_task: dict[str, list[tuple[float, str]]] = {}
    for key, row in rows.items():
        task = task_of(key)
        if row.score is not None:
            by_task.setdefault(task, []).append((row.score, key))
    pages = root / REPORT_DIR / PAGES_DIR
    for task, scores in by_task.items():
        mean = sum(s for s, _ in scores) / len(scores)
        page = pages / page_name(scores[0][1])
        col.scores[task] = (f"{mean:.2f}", _href(page, out_dir) if page.is_file() else None)
    return col


def write_index(top: Path, output: Path | None = None) -> Path:
    """Write ``index.html`` over the runs under ``top``; raises :class:`ReportInputError`."""
    from reports.html import environment

    if not top.is_dir():
        raise ReportInputError(f"--index {top}: no such folder; pass a folder that holds "
                               f"run roots")
    out_dir = (output or top).resolve()
    runs = [c for root in find_runs(top.resolve()) if (c := _column(root, out_dir))]
    if not runs:
        raise ReportInputError(f"--index {top}: no run root under it (a folder with "
                               f"{MANIFEST_NAME}, up to {MAX_DEPTH} levels down)")
    runs.sort(key=lambda c: c.created, reverse=True)
    tasks = sorted({t for c in runs for t in c.scores})
    html = environment().get_template("index.html.j2").render(runs=runs, tasks=tasks)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "index.html"
    atomic_write_text(path, html)
    return path
