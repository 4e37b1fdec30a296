"""Chart geometry for the report's inline SVG charts (rendered by ``templates``).

Python computes the shapes; the jinja template writes them out (escaping every label).
Every chart has a title and two axis labels. Per-instance charts with many instances group
neighbouring instances into at most ``MAX_BARS`` bars, so a 10,000-row run stays small.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from reports.figures import NOT_ATTEMPTED, Headline, InstanceResult

WIDTH = 640
HEIGHT = 250
PAD_LEFT = 64
PAD_RIGHT = 8
PAD_BOTTOM = 44
PAD_TOP = 30

STATUS_COLORS = {
    "passed": "#2e7d32",
    "completed": "#1565c0",
    "failed": "#c62828",
    "agent_failed": "#ad1457",
    "infra_failed": "#ef6c00",
    "blocked": "#6d4c41",
    "skipped": "#78909c",
    NOT_ATTEMPTED: "#9e9e9e",
}
DEFAULT_COLOR = "#5c6bc0"

PER_INSTANCE_LABELS = 6  # more bars than this: labels only in tooltips
MAX_BARS = 200  # more instances than this: neighbours share a bar (its max, range in tooltip)
SCORE_BINS = [f"{i / 10:.1f}-{(i + 1) / 10:.1f}" for i in range(10)]


def status_color(status: str) -> str:
    return STATUS_COLORS.get(status, DEFAULT_COLOR)


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    color: str
    tip: str


@dataclass(frozen=True)
class Label:
    x: float
    y: float
    text: str
    anchor: str = "middle"


@dataclass(frozen=True)
class Chart:
    """One SVG chart: title, axis labels, bars, tick labels; ``empty`` draws "no data"."""

    title: str
    x_label: str
    y_label: str
    height: int = HEIGHT
    bars: list[Bar] = field(default_factory=list)
    ticks: list[Label] = field(default_factory=list)
    axis_y: float | None = None  # y of the horizontal base line, if any
    empty: bool = False
    width: int = WIDTH
    pad_left: int = PAD_LEFT


def _r(v: float) -> float:
    return round(v, 2)


def _fit(label: str, width: float) -> str:
    """Shorten ``label`` to what fits in ``width`` px of 11 px text (the tooltip has it all)."""
    room = max(int(width / 6.5), 3)
    return label if len(label) <= room else label[: room - 1] + "…"


def column_chart(
    title: str,
    labels: Sequence[str],
    values: Sequence[float],
    *,
    x_label: str,
    y_label: str,
    colors: Sequence[str] | None = None,
    fmt: Callable[[float], str] = lambda v: f"{v:g}",
    show_labels: bool = True,
) -> Chart:
    """Vertical bars, one per label; each bar carries a tooltip with label and value."""
    if not values or max(values) <= 0:
        return Chart(title, x_label, y_label, empty=True)
    top = max(values)
    plot_w = WIDTH - PAD_LEFT - PAD_RIGHT
    plot_h = HEIGHT - PAD_TOP - PAD_BOTTOM
    base = PAD_TOP + plot_h
    step = plot_w / len(values)
    bar_w = max(step * 0.8, 0.5)
    bars: list[Bar] = []
    ticks = [
        Label(PAD_LEFT - 4, PAD_TOP + 8, fmt(top), "end"),
        Label(PAD_LEFT - 4, base, "0", "end"),
    ]
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        h = plot_h * value / top
        x = PAD_LEFT + i * step + (step - bar_w) / 2
        color = colors[i] if colors else DEFAULT_COLOR
        bars.append(
            Bar(_r(x), _r(base - h), _r(bar_w), _r(h), color, f"{label}: {fmt(value)}")
        )
        if show_labels:
            ticks.append(Label(_r(x + bar_w / 2), base + 14, _fit(label, step)))
            if value:
                ticks.append(Label(_r(x + bar_w / 2), _r(base - h - 3), fmt(value)))
    return Chart(title, x_label, y_label, bars=bars, ticks=ticks, axis_y=base)


def score_histogram(results: Sequence[InstanceResult]) -> Chart:
    """Scores of attempted, non-infra instances in tenths, 1.0 on its own, plus the rest."""
    counts = [0] * 10
    resolved = not_attempted = infra = 0
    for r in results:
        if not r.attempted:
            not_attempted += 1
        elif r.infra:
            infra += 1
        elif r.score >= 1.0:
            resolved += 1
        else:
            counts[min(int(r.score * 10), 9)] += 1
    labels = ["n/a", "infra", *SCORE_BINS, "1.0"]
    values = [not_attempted, infra, *counts, resolved]
    colors = [
        status_color(NOT_ATTEMPTED),
        status_color("infra_failed"),
        *["#90caf9"] * 10,
        "#2e7d32",
    ]
    return column_chart(
        "Score distribution (instances per score band)",
        labels,
        [float(v) for v in values],
        x_label="score band",
        y_label="instances",
        colors=colors,
        fmt=lambda v: f"{v:.0f}",
    )


def _group(
    known: list[tuple[InstanceResult, float]], fmt: Callable[[float], str]
) -> tuple[list[str], list[float], list[str]]:
    """``MAX_BARS`` bars of neighbouring instances (sorted, largest first): each its largest."""
    n = len(known)
    labels, values, colors = [], [], []
    for g in range(MAX_BARS):
        start, end = g * n // MAX_BARS, (g + 1) * n // MAX_BARS
        first, last = known[start][1], known[end - 1][1]
        labels.append(f"instances {start + 1}-{end} ({fmt(last)} to {fmt(first)})")
        values.append(first)
        colors.append(DEFAULT_COLOR)
    return labels, values, colors


def per_instance_chart(
    title: str,
    results: Sequence[InstanceResult],
    value: Callable[[InstanceResult], float | None],
    fmt: Callable[[float], str],
    *,
    y_label: str,
) -> Chart:
    """One bar per instance with a known value, largest first, coloured by status."""
    known = [(r, v) for r in results if (v := value(r)) is not None]
    known.sort(key=lambda rv: (-rv[1], rv[0].key))
    if len(known) > MAX_BARS:
        labels, values, colors = _group(known, fmt)
        x_label = f"instances, largest first ({len(known)} in {len(values)} groups)"
    else:
        labels = [r.instance_id if len(known) <= PER_INSTANCE_LABELS else r.key for r, _ in known]
        values = [v for _, v in known]
        colors = [status_color(r.status) for r, _ in known]
        x_label = "instances, largest first"
    return column_chart(
        title,
        labels,
        values,
        x_label=x_label,
        y_label=y_label,
        colors=colors,
        fmt=fmt,
        show_labels=len(values) <= PER_INSTANCE_LABELS,
    )


def status_breakdown(head: Headline) -> Chart:
    """Horizontal bars: selected instances per status."""
    title = "Status breakdown (selected instances)"
    items = list(head.counts.items())
    if not items:
        return Chart(title, "instances", "status", empty=True)
    row_h = 24
    left = 160
    height = PAD_TOP + PAD_BOTTOM + row_h * len(items)
    top = max(v for _, v in items)
    plot_w = WIDTH - left - 60
    bars: list[Bar] = []
    ticks: list[Label] = []
    for i, (status, n) in enumerate(items):
        y = PAD_TOP + i * row_h
        w = plot_w * n / top if top else 0
        pct = 100 * n / head.selected if head.selected else 0
        ticks.append(Label(left - 8, y + 15, status, "end"))
        bars.append(Bar(left, y + 3, _r(w), row_h - 6, status_color(status), f"{status}: {n}"))
        ticks.append(Label(_r(left + w + 4), y + 15, f"{n} ({pct:.0f}%)", "start"))
    return Chart(
        title,
        "instances",
        "status",
        height=height,
        bars=bars,
        ticks=ticks,
        axis_y=PAD_TOP + row_h * len(items),
        pad_left=left,
    )
