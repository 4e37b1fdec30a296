"""Perf figures and their goals (see ``tests/perf/conftest.py``)."""

from __future__ import annotations

import json
import math
import operator
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.core.fsutil import atomic_write_text

MODES = ("enforce", "warn")
_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt}
FIGURES: dict[str, dict[str, object]] = {}


def goal_mode() -> str:
    mode = os.environ.get("HARNESS_PERF_GOALS", "enforce")
    if mode not in MODES:
        raise pytest.UsageError(f"HARNESS_PERF_GOALS={mode!r} is unknown; use enforce or warn")
    return mode


def check_goal(name: str, value: float, goal: float, *, op: str = "<=", unit: str = "x",
               mode: str | None = None) -> bool:
    """Keep ``name``'s figure and check ``value op goal``; returns whether the goal is met.

    A value that is not a finite positive number is a broken measurement: always a failure.
    """
    mode = mode or goal_mode()
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        pytest.fail(f"perf figure {name}: broken measurement {value!r}")
    met = _OPS[op](float(value), float(goal))
    FIGURES[name] = {"value": round(float(value), 4), "goal": goal, "op": op, "unit": unit,
                     "met": met}
    if met:
        return True
    line = f"PERF WARNING {name} = {value:.3f}{unit} (goal {op} {goal}{unit})"
    if mode == "warn":
        print(f"\n{line}")
        return False
    pytest.fail(line, pytrace=False)


def write_figures(session: pytest.Session) -> None:
    """Merge this session's figures into ``HARNESS_PERF_JSON`` and name those past goal."""
    if not FIGURES or hasattr(session.config, "workerinput"):
        return
    path = Path(os.environ.get("HARNESS_PERF_JSON", "perf_ratios.json"))
    try:
        kept = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    except (OSError, ValueError):
        kept = {}
    kept = kept if isinstance(kept, dict) else {}
    kept.update(FIGURES)
    atomic_write_text(path, json.dumps(kept, indent=2, sort_keys=True) + "\n")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        missed = sorted(n for n, f in FIGURES.items() if not f["met"])
        reporter.write_line(f"perf figures: {len(FIGURES)} kept in {path}"
                            + (f"; past their goal: {', '.join(missed)}" if missed else ""))
