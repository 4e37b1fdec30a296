"""The repeated-attempt section of the report, formatted once for Markdown, HTML and the
terminal: the attempts behind the figures, the mean score with its interval, pass@k, and the
unstable tasks (:class:`harness.run.samples.SampleStats`)."""

from __future__ import annotations

from harness.run.samples import SampleStats, TaskSpread
from reports import fmt
from reports.figures import CompareReport, ModelUse

MAX_UNSTABLE = 50  # rows in the Markdown and terminal tables (the HTML shows them all)

UNSTABLE_HEADERS = ["Task", "Attempts", "Scores", "Min", "Max", "Mean", "Solved", "Why"]
PASS_HEADERS = ["k", "pass@k", "Tasks", "Attempts", "Tasks with fewer than k attempts"]
MODEL_HEADERS = [
    "Model",
    "Source",
    "Instances",
    "Calls",
    "Refused",
    "Prompt tokens",
    "Completion tokens",
    "Cost",
    "Allowed",
]


def _missing(stats: SampleStats) -> str:
    if not stats.attempts_missing:
        return "none missing"
    by = ", ".join(f"{status} {n}" for status, n in stats.missing_by_status.items())
    return f"{stats.attempts_missing} missing ({by}), not counted"


def mean_text(stats: SampleStats) -> str:
    """``0.412, 95% CI [0.380, 0.445]`` with the tasks and attempts behind it."""
    if stats.mean_score is None:
        return "n/a (no task has an attempt that counts)"
    ci = stats.mean_interval
    text = fmt.score(stats.mean_score)
    if ci is not None:
        text += (
            f", {ci.level:.0%} CI [{fmt.score(ci.low)}, {fmt.score(ci.high)}] "
            f"(bootstrap over {ci.tasks} tasks with their {ci.attempts} attempts; "
            f"{ci.resamples} resamples, seed {ci.seed})"
        )
    return text


def summary_items(stats: SampleStats) -> list[tuple[str, str]]:
    """(label, value) pairs: each figure with the tasks and attempts behind it."""
    items = [
        (
            "Attempts",
            f"K={stats.k} per task; {stats.tasks} task(s), {stats.attempts_expected} selected "
            f"attempt(s), {stats.attempts} counted ({stats.attempts_per_task_min}-"
            f"{stats.attempts_per_task_max} per scored task); {_missing(stats)}",
        ),
        ("Mean score", mean_text(stats)),
        (
            "Mean score, missing attempts 0",
            f"{fmt.score(stats.mean_score_missing_zero)} (over {stats.tasks} task(s), "
            f"{stats.attempts_expected} selected attempt(s))",
        ),
        (
            "Unstable tasks",
            f"{len(stats.unstable)} of {stats.tasks_scored} (attempts disagree: solved and "
            f"unsolved, or score range > {stats.unstable_range:g})",
        ),
    ]
    if stats.tasks_unscored:
        items.append(
            (
                "Tasks without a counted attempt",
                f"{len(stats.tasks_unscored)}: {', '.join(stats.tasks_unscored[:20])}"
                + (" …" if len(stats.tasks_unscored) > 20 else ""),
            )
        )
    return items


def pass_rows(stats: SampleStats) -> list[list[str]]:
    return [
        [str(p.k), fmt.pct(p.value), str(p.tasks), str(p.attempts), str(p.tasks_short)]
        for p in stats.pass_at
    ]


def _scores(t: TaskSpread) -> str:
    return " ".join(fmt.score(s, 2) for s in t.scores)


def unstable_row(t: TaskSpread) -> list[str]:
    return [
        t.task,
        f"{t.attempts}/{t.expected}",
        _scores(t),
        fmt.score(t.min),
        fmt.score(t.max),
        fmt.score(t.mean),
        f"{t.solved}/{t.attempts}",
        "; ".join(t.why_unstable),
    ]


def unstable_rows(stats: SampleStats, limit: int | None = None) -> list[list[str]]:
    rows = [unstable_row(t) for t in stats.unstable_tasks()]
    return rows if limit is None else rows[:limit]


def _tokens(value: int | None) -> str:
    return "n/a" if value is None else f"{value:,}"


def model_rows(use: ModelUse) -> list[list[str]]:
    rows = []
    for t in use.totals:
        cost = fmt.usd(t.cost_usd) if t.cost_usd is not None else "unknown"
        if t.cost_usd is not None and t.cost_unknown_rows:
            cost += f" (+{t.cost_unknown_rows} row(s) unknown)"
        rows.append(
            [
                t.model,
                t.source,
                str(t.instances),
                str(t.calls),
                str(t.refused),
                _tokens(t.prompt_tokens),
                _tokens(t.completion_tokens),
                cost,
                "yes" if t.allowed else "NO",
            ]
        )
    return rows


def models_note(use: ModelUse) -> str:
    note = f"{use.rows_recorded} row(s) recorded their model calls"
    if use.rows_unrecorded:
        note += f"; {use.rows_unrecorded} attempted row(s) did not"
    return note


def attempts_text(cmp: CompareReport) -> str:
    """Repeated attempts behind a comparison (the figures are per task)."""
    return (
        f"up to {cmp.attempts_per_task_a} per task in A and {cmp.attempts_per_task_b} in B; "
        f"{cmp.shared_attempts_a} and {cmp.shared_attempts_b} attempts on the {cmp.shared} "
        "shared tasks (scores are means over each task's attempts)"
    )
