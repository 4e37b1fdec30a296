"""Rich renderings of a comparison for the terminal."""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from harness.run.samples import SampleStats
from reports import fmt, samples_view
from reports.figures import CompareReport, ModelUse

MAX_ROWS = 50
CHANGE_STYLES = {"gained": "green", "improved": "green", "lost": "red", "regressed": "red"}


def compare_renderable(cmp: CompareReport, max_rows: int = MAX_ROWS) -> RenderableType:
    ci, mc = cmp.bootstrap, cmp.mcnemar
    summary = Table(title=f"{cmp.run_a.run_id} (A) → {cmp.run_b.run_id} (B)", show_header=False)
    summary.add_column("figure", style="bold")
    summary.add_column("value")
    summary.add_row(
        "shared instances", f"{cmp.shared} (only A {len(cmp.only_a)}, only B {len(cmp.only_b)})"
    )
    summary.add_row("mean score A / B", f"{fmt.score(cmp.mean_a)} / {fmt.score(cmp.mean_b)}")
    summary.add_row(
        "mean difference B-A",
        f"{fmt.signed(ci.mean_diff)}  {ci.level:.0%} CI [{fmt.signed(ci.low)}, {fmt.signed(ci.high)}]"
        f"  (bootstrap, {ci.resamples} resamples, seed {ci.seed})",
    )
    summary.add_row("resolved A / B", f"{cmp.resolved_a} / {cmp.resolved_b}")
    if cmp.attempts_per_task_a is not None:
        summary.add_row("attempts", samples_view.attempts_text(cmp))
    summary.add_row(
        "McNemar",
        f"b={mc.b} c={mc.c}  exact p={mc.exact_p:.4g}  χ²(cc)={mc.chi2:.3f} p={mc.chi2_p:.4g}",
    )
    changes = Table(title="changed instances")
    for col in ("instance", "change", "status A", "status B", "score A", "score B", "Δ"):
        changes.add_column(col, justify="right" if col.startswith(("score", "Δ")) else "left")
    changed = [c for c in cmp.changes if c.change != "same"]
    for c in changed[:max_rows]:
        changes.add_row(
            c.key,
            Text(c.change, style=CHANGE_STYLES.get(c.change, "")),
            c.status_a,
            c.status_b,
            fmt.score(c.score_a),
            fmt.score(c.score_b),
            fmt.signed(c.delta),
        )
    parts: list[RenderableType] = [summary]
    parts += [Text(f"warning: {w}", style="yellow") for w in cmp.warnings]
    if changed:
        parts.append(changes)
        if len(changed) > max_rows:
            parts.append(Text(f"... {len(changed) - max_rows} more changed (see --json)"))
    else:
        parts.append(Text("no instance changed"))
    return Group(*parts)


def print_compare(cmp: CompareReport, console: Console | None = None) -> None:
    (console or Console()).print(compare_renderable(cmp))


def _table(title: str, headers: list[str], rows: list[list[str]]) -> Table:
    table = Table(title=title)
    for i, h in enumerate(headers):
        table.add_column(h, no_wrap=i == 0)  # the task or model name whole
    for r in rows:
        table.add_row(*r)
    return table


def samples_renderable(stats: SampleStats, max_rows: int = samples_view.MAX_UNSTABLE) -> Group:
    """Repeated attempts: the figures with the attempts behind them, pass@k, unstable tasks."""
    summary = Table(title="repeated attempts", show_header=False)
    summary.add_column("figure", style="bold")
    summary.add_column("value")
    for label, value in samples_view.summary_items(stats):
        summary.add_row(label, value)
    parts: list[RenderableType] = [
        summary,
        _table("pass@k", samples_view.PASS_HEADERS, samples_view.pass_rows(stats)),
    ]
    unstable = stats.unstable_tasks()
    if unstable:
        rows = samples_view.unstable_rows(stats, max_rows)
        parts.append(
            _table(f"unstable tasks ({len(unstable)})", samples_view.UNSTABLE_HEADERS, rows)
        )
        if len(unstable) > len(rows):
            parts.append(Text(f"... {len(unstable) - len(rows)} more (see report.html)"))
    else:
        parts.append(Text("no unstable task"))
    return Group(*parts)


def models_renderable(use: ModelUse) -> Group:
    """The models the rows called; the flagged rows in red."""
    parts: list[RenderableType] = [
        _table("models", samples_view.MODEL_HEADERS, samples_view.model_rows(use)),
        Text(samples_view.models_note(use)),
    ]
    for f in use.flagged:
        parts.append(Text(f"flagged: {f.key}: {f.flag}", style="red"))
    return Group(*parts)
