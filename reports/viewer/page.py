"""The instance pages of a run (``report/instances/<unit>.html``): static, offline, one
file each, every agent-written text escaped (jinja2 autoescape) and capped, the run's
secrets redacted from the page as written."""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from harness.core.fsutil import atomic_write_text
from harness.core.outcomes import split_attempt
from harness.run.secrets import SecretScanner, secrets_from_env
from reports.figures import InstanceResult
from reports.viewer import sources
from reports.viewer.steps import Step, cap

PAGES_DIR = "instances"
PAGE_BUDGET = 2 << 20  # characters of step texts on one page; past it, texts are short
SHORT = 300
DEFAULT_KEY_ENV = "HARNESS_MODEL_API_KEY"


def task_of(key: str) -> str:
    """The task a unit is an attempt at (``pb/t@2`` -> ``pb/t``)."""
    benchmark, _, unit = key.partition("/")
    return f"{benchmark}/{split_attempt(unit)[0]}"


def page_name(key: str) -> str:
    """The file of a unit's page (``programbench/task@2`` -> ``programbench__task@2.html``)."""
    return key.replace("/", "__") + ".html"


@dataclass
class Sibling:
    key: str
    href: str
    score: str
    outcome: str
    steps: int
    cost: str
    first_change: str  # where this attempt's commands leave the first attempt's


def scanner_for(config: dict[str, Any]) -> SecretScanner:
    """The run's secrets: its ``--agent-env`` values and the model gateway's provider key,
    from this environment (as the run-end scan takes them)."""
    names = [str(n) for n in config.get("agent.env") or []]
    names.append(str(config.get("agent.model_key_env") or DEFAULT_KEY_ENV))
    return SecretScanner(secrets_from_env(names))


def _budget(steps: list[Step]) -> list[Step]:
    used = 0
    for step in steps:
        used += len(step.title) + len(step.body) + sum(len(t) for _, t in step.folded)
        if used > PAGE_BUDGET:
            step.title = cap(step.title, SHORT)
            step.body = cap(step.body, SHORT)
            step.folded = [(label, cap(text, SHORT)) for label, text in step.folded]
    return steps


def _redact(steps: list[Step], verdict: sources.Verdict, scanner: SecretScanner) -> None:
    """The run's secrets out of every text before it is escaped into the page (an escaped
    form, ``&#34;`` for a quote, would hide one from a scan of the page)."""
    if not scanner:
        return
    r = scanner.redact_text
    for step in steps:
        step.title, step.body = r(step.title), r(step.body)
        step.status = r(step.status) if step.status else step.status
        step.model = r(step.model) if step.model else step.model
        step.folded = [(label, r(text)) for label, text in step.folded]
    verdict.lines = [(label, r(value)) for label, value in verdict.lines]
    verdict.tests = [(r(name), ok) for name, ok in verdict.tests]
    verdict.text = r(verdict.text)


def _rows(steps: list[Step]) -> list[dict[str, Any]]:
    """The timeline's rows: time since the first timed step, cumulative cost."""
    start = next((s.at for s in steps if s.at is not None), None)
    total = 0.0
    out = []
    for n, s in enumerate(steps, 1):
        if s.cost_usd:
            total += s.cost_usd
        since = s.at - start if s.at is not None and start is not None else None
        out.append({"n": n, "s": s, "cum": total,
                    "t": f"+{since:.1f} s" if since is not None and 0 <= since < 1e7 else ""})
    return out


def _phases(result: InstanceResult, details: dict[str, Any]) -> list[tuple[str, float]]:
    phases: list[tuple[str, float]] = []
    timings = (details.get("eval") or {}).get("timings")
    if isinstance(timings, dict):
        phases += [(str(k).removesuffix("_s"), float(v)) for k, v in timings.items()
                   if isinstance(v, int | float) and not isinstance(v, bool)]
    wall = (details.get("agent") or {}).get("wall_s")
    if isinstance(wall, int | float):
        phases.append(("agent", float(wall)))
    if result.duration_s is not None:
        phases.append(("instance", float(result.duration_s)))
    return phases


def write_pages(run: Any, out_dir: Path, compare_out: Path | None = None) -> dict[str, str]:
    """Write every unit's page under ``out_dir/instances``; ``key -> href`` from the report.
    A task's attempts are read together (their pages show each other), one task at a time;
    a unit whose records cannot be read at all gets a page that says so."""
    pages = out_dir / PAGES_DIR
    pages.mkdir(parents=True, exist_ok=True)
    scanner = scanner_for(run.manifest.config)
    by_task: dict[str, list[InstanceResult]] = defaultdict(list)
    for r in run.results:
        if r.key in run.rows:
            by_task[task_of(r.key)].append(r)
    hrefs = {}
    for group in by_task.values():
        rows = {r.key: run.rows[r.key].model_dump(mode="json", by_alias=True) for r in group}
        timelines = {r.key: _timeline(run, r, rows[r.key]) for r in group}
        siblings = _siblings(group, timelines)
        for r in group:
            name = page_name(r.key)
            html = _render(run, r, rows[r.key], timelines[r.key], siblings, pages,
                           compare_out, scanner)
            atomic_write_text(pages / name, html.encode("utf-8", "replace").decode("utf-8"))
            hrefs[r.key] = f"{PAGES_DIR}/{quote(name)}"
    return hrefs


def _render(run: Any, r: InstanceResult, row: dict[str, Any], steps: list[Step],
            siblings: list[Sibling], pages: Path, compare_out: Path | None,
            scanner: SecretScanner) -> str:
    from reports.html import environment

    folder = run.root / r.benchmark / r.instance_id
    try:
        verdict = sources.verdict(run.root, folder, row)
    except Exception as exc:  # an agent's file no reader foresaw: said, never the report's end
        verdict = sources.Verdict(lines=[("not read", f"{type(exc).__name__}")])
    _redact(steps, verdict, scanner)
    other = compare_out / PAGES_DIR / page_name(r.key) if compare_out is not None else None
    html = environment().get_template("instance.html.j2").render(
        run_id=run.run_id, r=r, rows=_rows(_budget(steps)), verdict=verdict,
        phases=_phases(r, row.get("details") or {}),
        siblings=siblings if len(siblings) > 1 else [],
        compare=quote(os.path.relpath(other, pages)) if other and other.is_file() else None,
        folder=quote(os.path.relpath(folder, pages)) + "/")
    return scanner.redact_text(html) if scanner else html


def _timeline(run: Any, r: InstanceResult, row: dict[str, Any]) -> list[Step]:
    try:
        return sources.timeline(run.root, run.root / r.benchmark / r.instance_id, row)
    except Exception as exc:  # an agent's file no reader foresaw: said, never the report's end
        return [Step("event", f"the agent's records could not be read ({type(exc).__name__})",
                     failed=True)]


def _siblings(group: list[InstanceResult], timelines: dict[str, list[Step]]) -> list[Sibling]:
    """A task's attempts side by side (none for a task with one)."""
    if len(group) < 2:
        return []
    group = sorted(group, key=lambda r: split_attempt(r.instance_id)[1] or 0)
    first = [s.title for s in timelines[group[0].key] if s.kind == "command"]
    out = []
    for r in group:
        steps = timelines[r.key]
        mine = [s.title for s in steps if s.kind == "command"]
        change = next((f"command {i + 1}" for i, (a, b) in enumerate(zip(first, mine,
                                                                           strict=False))
                       if a != b), "" if len(first) == len(mine) else
                      f"command {min(len(first), len(mine)) + 1}")
        out.append(Sibling(r.key, quote(page_name(r.key)), f"{r.raw_score}"
                           if r.raw_score is not None
                           else "-", r.outcome, len(steps),
                           f"${r.cost_usd:.4f}" if r.cost_usd is not None else "unknown",
                           change))
    return out
