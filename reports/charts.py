"""Inline SVG charts generated in Python: no script, no network, no library."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape

from reports.figures import NOT_ATTEMPTED, Headline, InstanceResult

WIDTH = 640
HEIGHT = 220
PAD_LEFT = 48
PAD_BOTTOM = 42
PAD_TOP = 12

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
SCORE_BINS = [f"{i / 10:.1f}-{(i + 1) / 10:.1f}" for i in range(10)]


def status_color(status: str) -> str:
    return STATUS_COLORS.get(status, DEFAULT_COLOR)


def _svg(title: str, body: list[str], height: int = HEIGHT) -> str:
    return (
        f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">'
        f"<title>{escape(title)}</title>{''.join(body)}</svg>"
    )


def _empty(title: str) -> str:
    return _svg(
        title,
        [
            f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle" class="muted">no data</text>'
        ],
    )


def _fit(label: str, width: float) -> str:
    """Shorten ``label`` to what fits in ``width`` px of 11 px text (the tooltip has it all)."""
    room = max(int(width / 6.5), 3)
    return label if len(label) <= room else label[: room - 1] + "…"


def column_chart(
    title: str,
    labels: Sequence[str],
    values: Sequence[float],
    *,
    colors: Sequence[str] | None = None,
    fmt: Callable[[float], str] = lambda v: f"{v:g}",
    show_labels: bool = True,
) -> str:
    """Vertical bars, one per label; each bar carries a tooltip with label and value."""
    if not values or max(values) <= 0:
        return _empty(title)
    top = max(values)
    plot_w = WIDTH - PAD_LEFT - 8
    plot_h = HEIGHT - PAD_TOP - PAD_BOTTOM
    step = plot_w / len(values)
    bar_w = max(step * 0.8, 0.5)
    body = [
        f'<line x1="{PAD_LEFT}" y1="{PAD_TOP + plot_h}" x2="{WIDTH - 8}" '
        f'y2="{PAD_TOP + plot_h}" class="axis"/>',
        f'<text x="{PAD_LEFT - 4}" y="{PAD_TOP + 8}" text-anchor="end" class="tick">'
        f"{escape(fmt(top))}</text>",
        f'<text x="{PAD_LEFT - 4}" y="{PAD_TOP + plot_h}" text-anchor="end" class="tick">0</text>',
    ]
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        h = plot_h * value / top
        x = PAD_LEFT + i * step + (step - bar_w) / 2
        color = colors[i] if colors else DEFAULT_COLOR
        body.append(
            f'<rect x="{x:.2f}" y="{PAD_TOP + plot_h - h:.2f}" width="{bar_w:.2f}" '
            f'height="{h:.2f}" fill="{color}"><title>{escape(label)}: {escape(fmt(value))}'
            "</title></rect>"
        )
        if show_labels:
            body.append(
                f'<text x="{x + bar_w / 2:.2f}" y="{PAD_TOP + plot_h + 14}" '
                f'text-anchor="middle" class="tick">{escape(_fit(label, step))}</text>'
            )
            if value:
                body.append(
                    f'<text x="{x + bar_w / 2:.2f}" y="{PAD_TOP + plot_h - h - 3:.2f}" '
                    f'text-anchor="middle" class="tick">{escape(fmt(value))}</text>'
                )
    return _svg(title, body)


def score_histogram(results: Sequence[InstanceResult]) -> str:
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
        colors=colors,
        fmt=lambda v: f"{v:.0f}",
    )


def per_instance_chart(
    title: str,
    results: Sequence[InstanceResult],
    value: Callable[[InstanceResult], float | None],
    fmt: Callable[[float], str],
) -> str:
    """One bar per instance with a known value, largest first, coloured by status."""
    known = [(r, v) for r in results if (v := value(r)) is not None]
    known.sort(key=lambda rv: (-rv[1], rv[0].key))
    return column_chart(
        title,
        [r.instance_id if len(known) <= PER_INSTANCE_LABELS else r.key for r, _ in known],
        [v for _, v in known],
        colors=[status_color(r.status) for r, _ in known],
        fmt=fmt,
        show_labels=len(known) <= PER_INSTANCE_LABELS,
    )


def status_breakdown(head: Headline) -> str:
    """Horizontal bars: selected instances per status."""
    items = list(head.counts.items())
    if not items:
        return _empty("Status breakdown")
    row_h = 24
    height = PAD_TOP * 2 + row_h * len(items)
    top = max(v for _, v in items)
    plot_w = WIDTH - 160 - 60
    body = []
    for i, (status, n) in enumerate(items):
        y = PAD_TOP + i * row_h
        w = plot_w * n / top if top else 0
        pct = 100 * n / head.selected if head.selected else 0
        body.append(
            f'<text x="152" y="{y + 15}" text-anchor="end" class="tick">{escape(status)}</text>'
            f'<rect x="160" y="{y + 3}" width="{w:.2f}" height="{row_h - 6}" '
            f'fill="{status_color(status)}"><title>{escape(status)}: {n}</title></rect>'
            f'<text x="{160 + w + 4:.2f}" y="{y + 15}" class="tick">{n} ({pct:.0f}%)</text>'
        )
    return _svg("Status breakdown (selected instances)", body, height)
