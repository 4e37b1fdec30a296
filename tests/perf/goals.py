"""Perf figures, their goals, the noise margin, and the history (see ``tests/perf/conftest.py``).

A figure is checked against its goal with a stated **noise margin** (default
:data:`MARGIN`, 1.15: a ratio goal of 1.0 fails above 1.15; a ``>=`` goal of 1.8 fails below
1.8 / 1.15). The margin is what repeated runs of the suite on the 2-core machine showed a
figure to move by between runs of one tree (``docs/development/perf.md``):

* within its goal: **met**;
* past its goal, within the margin: **tolerated**, a ``PERF WARNING`` line, the test passes;
* past the margin, first measurement: the test is **measured once more** (the conftest runs
  it again); the better of the two counts;
* past the margin on the better of two: the test **fails** (``HARNESS_PERF_GOALS=enforce``,
  the default and CI's mode); ``HARNESS_PERF_GOALS=warn`` only warns (a local look).

A **yardstick** figure (``yardstick=True``) has a goal the design being measured is not
expected to meet yet: it is kept, shown, named when past its goal and compared with the
history, but never fails a run. A figure that is not a finite positive number is a broken
measurement and always fails.

Every session writes its figures to ``HARNESS_PERF_JSON`` (default ``perf_ratios.json``) and,
when ``HARNESS_PERF_HISTORY`` names a file, appends one JSON line there: the commit, the time,
whether the session passed, and each figure. A figure worse than the last passing line's by
more than its margin is named in the summary even when it is inside its goal.
"""

from __future__ import annotations

import json
import math
import operator
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from harness.core.fsutil import atomic_write_text

MODES = ("enforce", "warn")
MARGIN = 1.15
_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt}
REPO = Path(__file__).resolve().parents[2]


class Figure(BaseModel):
    """One figure as ``perf_ratios.json`` keeps it."""

    model_config = ConfigDict(extra="forbid")

    value: float  # the better of ``values``
    values: list[float]  # every measurement this session (two when it was measured again)
    goal: float
    op: str
    unit: str
    margin: float
    yardstick: bool = False
    met: bool
    state: str  # met | tolerated | past_margin | yardstick_missed


class HistoryLine(BaseModel):
    """One line of ``HARNESS_PERF_HISTORY``: one perf session."""

    model_config = ConfigDict(extra="forbid")

    commit: str
    ts_unix: float
    passed: bool
    figures: dict[str, Figure]


FIGURES: dict[str, Figure] = {}
# Node ids whose first measurement had a figure past its margin: the conftest runs them again.
REMEASURE: set[str] = set()


class PastMargin(Exception):
    """A figure past its noise margin on its first measurement (it is measured again)."""


def goal_mode() -> str:
    mode = os.environ.get("HARNESS_PERF_GOALS", "enforce")
    if mode not in MODES:
        raise pytest.UsageError(f"HARNESS_PERF_GOALS={mode!r} is unknown; use enforce or warn")
    return mode


def lower_is_better(op: str) -> bool:
    return op in ("<=", "<")


def limit(goal: float, op: str, margin: float) -> float:
    """The value past which a figure fails: the goal widened by the margin."""
    return goal * margin if lower_is_better(op) else goal / margin


def _state(value: float, goal: float, op: str, margin: float, yardstick: bool) -> str:
    if _OPS[op](value, goal):
        return "met"
    if yardstick:
        return "yardstick_missed"
    return "tolerated" if _OPS[op](value, limit(goal, op, margin)) else "past_margin"


def check_goal(name: str, value: float, goal: float, *, op: str = "<=", unit: str = "x",
               margin: float = MARGIN, yardstick: bool = False, mode: str | None = None,
               nodeid: str | None = None) -> bool:
    """Keep ``name``'s figure and check it (see the module's text); returns whether the goal
    is met. A second check of the same name in one session is its re-measurement: the
    better of the two values counts."""
    mode = mode or goal_mode()
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        pytest.fail(f"perf figure {name}: broken measurement {value!r}")
    earlier = FIGURES.get(name)
    values = [*(earlier.values if earlier else []), round(float(value), 4)]
    best = min(values) if lower_is_better(op) else max(values)
    state = _state(best, goal, op, margin, yardstick)
    FIGURES[name] = Figure(value=best, values=values, goal=goal, op=op, unit=unit,
                           margin=margin, yardstick=yardstick, met=state == "met", state=state)
    if state == "met":
        return True
    line = (f"PERF WARNING {name} = {best:.3f}{unit} (goal {op} {goal}{unit}"
            + (", a yardstick)" if yardstick else f", fails past {limit(goal, op, margin):.3f}"
               f"{unit})") + (f" best of {values}" if len(values) > 1 else ""))
    if state in ("tolerated", "yardstick_missed") or mode == "warn":
        print(f"\n{line}")
        return False
    if len(values) == 1 and nodeid is not None and nodeid not in REMEASURE:
        REMEASURE.add(nodeid)
        raise PastMargin(f"{line}: measured once more")
    pytest.fail(line, pytrace=False)


def current_commit() -> str:
    given = os.environ.get("HARNESS_PERF_COMMIT")
    if given:
        return given
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() or "unknown"


def read_history(path: Path) -> list[HistoryLine]:
    """The history's lines, oldest first; a line that does not parse (a torn last write)
    is passed over."""
    lines: list[HistoryLine] = []
    if not path.exists():
        return lines
    for raw in path.read_text(encoding="utf-8").splitlines():
        try:
            lines.append(HistoryLine.model_validate_json(raw))
        except ValueError:
            continue
    return lines


def regressions(figures: dict[str, Figure], history: list[HistoryLine]) -> list[str]:
    """Each figure worse than the last passing session's by more than its margin."""
    landed = next((h for h in reversed(history) if h.passed), None)
    if landed is None:
        return []
    named = []
    for name, fig in sorted(figures.items()):
        old = landed.figures.get(name)
        if old is None:
            continue
        factor = fig.value / old.value if lower_is_better(fig.op) else old.value / fig.value
        if factor > fig.margin:
            named.append(f"{name} {old.value:g} -> {fig.value:g}{fig.unit} (x{factor:.2f} "
                         f"worse than {landed.commit[:12]}, margin {fig.margin})")
    return named


def append_history(path: Path, passed: bool) -> list[str]:
    """Append this session's line to the history; returns the regressions it names."""
    history = read_history(path)
    found = regressions(FIGURES, history)
    line = HistoryLine(commit=current_commit(), ts_unix=round(time.time(), 3), passed=passed,
                       figures=dict(FIGURES))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        fh.seek(0, os.SEEK_END)
        torn = fh.tell() > 0 and (fh.seek(-1, os.SEEK_END), fh.read(1))[1] != b"\n"
        fh.write((b"\n" if torn else b"") + line.model_dump_json().encode() + b"\n")
        fh.flush()
        os.fsync(fh.fileno())
    return found


def write_figures(session: pytest.Session, exitstatus: int = 0) -> None:
    """Merge this session's figures into ``HARNESS_PERF_JSON``, append them to the history,
    and name those past their goal and those worse than the last passing session."""
    if not FIGURES or hasattr(session.config, "workerinput"):
        return
    path = Path(os.environ.get("HARNESS_PERF_JSON", "perf_ratios.json"))
    try:
        kept: Any = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    except (OSError, ValueError):
        kept = {}
    kept = kept if isinstance(kept, dict) else {}
    kept.update({name: fig.model_dump() for name, fig in FIGURES.items()})
    atomic_write_text(path, json.dumps(kept, indent=2, sort_keys=True) + "\n")
    history = os.environ.get("HARNESS_PERF_HISTORY")
    worse = append_history(Path(history), exitstatus == 0) if history else []
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    missed = sorted(n for n, f in FIGURES.items() if not f.met)
    reporter.write_line(f"perf figures: {len(FIGURES)} kept in {path}"
                        + (f"; past their goal: {', '.join(missed)}" if missed else "")
                        + (f"; history: {history}" if history else ""))
    for entry in worse:
        reporter.write_line(f"PERF REGRESSION {entry}")
