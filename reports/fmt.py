"""Small text formatters shared by the HTML, Markdown, terminal and progress views."""

from __future__ import annotations


def pct(rate: float | None, digits: int = 1) -> str:
    return "n/a" if rate is None else f"{100 * rate:.{digits}f}%"


def score(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def usd(value: float | None) -> str:
    return "n/a" if value is None else f"${value:,.2f}"


def signed(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:+.{digits}f}"


def duration(seconds: float | None) -> str:
    """``2.5s``, ``45s``, ``12m03s``, ``1h12m``: compact and monotone in the value."""
    if seconds is None:
        return "n/a"
    if seconds < 9.95:
        return f"{max(seconds, 0.0):.1f}s"
    s = max(round(seconds), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def count_rate(n: int, rate: float | None) -> str:
    return f"{n} ({pct(rate)})"


def excluded_note(reasons: dict[str, int]) -> str:
    """"; 2 excluded: docker_unavailable 1, not_attempted 1" (empty when none is excluded)."""
    total = sum(reasons.values())
    if not total:
        return ""
    return f"; {total} excluded: " + ", ".join(f"{k} {v}" for k, v in reasons.items())
