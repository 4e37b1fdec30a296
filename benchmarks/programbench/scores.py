"""Leaderboard score files and the run's per-instance scores (pure; no Docker).

Two registry formats occur in ``_stats/score.json``: the legacy per-instance float
``{iid: score}`` and the per-test map ``{iid: {"<branch>/<junit name>": passed}}``. A per-test
entry reduces to a score on a key set: by default its own keys less the installed
``tests.json`` ignore list (inactive branches and ignored tests), or, when the run has its
own per-test results, the common keys of both (reference §9).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from benchmarks.programbench import NEAR_RESOLVED_AT
from benchmarks.programbench.tasks import tasks_dir
from harness.api import RESOLVED_AT, Outcome, read_ledger

HEADLINE_N = 200


class Headline(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instances: int
    mean_over_200: float
    resolved: int
    near_resolved: int
    resolved_pct: float
    near_resolved_pct: float


class ScoresFile(BaseModel):
    """A leaderboard score file, loaded."""

    model_config = ConfigDict(extra="forbid")

    path: str
    name: str
    format: Literal["per_instance", "per_test"]
    scores: dict[str, float]  # per instance, after reduction (own keys less 1.2.5 ignores)
    per_test: dict[str, dict[str, bool]] | None = Field(default=None, exclude=True, repr=False)

    def headline(self, n: int = HEADLINE_N) -> Headline:
        values = list(self.scores.values())
        resolved = sum(v >= RESOLVED_AT for v in values)
        near = sum(v >= NEAR_RESOLVED_AT for v in values)
        return Headline(
            instances=len(values),
            mean_over_200=sum(values) / n,
            resolved=resolved,
            near_resolved=near,
            resolved_pct=100.0 * resolved / n,
            near_resolved_pct=100.0 * near / n,
        )


@lru_cache(maxsize=512)
def scored_key_filter(instance_id: str) -> tuple[frozenset[str], frozenset[str]] | None:
    """``(active branches, ignored "branch/test" keys)`` from the installed tests.json."""
    path = tasks_dir() / instance_id / "tests.json"
    if not path.exists():
        return None
    branches: dict[str, Any] = json.loads(path.read_text()).get("branches") or {}
    active = frozenset(b for b, info in branches.items() if not info.get("ignored"))
    ignored = frozenset(
        f"{b}/{t['name']}" for b, info in branches.items() for t in info.get("ignored_tests") or []
    )
    return active, ignored


def current_keys(instance_id: str, keys: set[str] | frozenset[str]) -> set[str]:
    """``keys`` less what the installed programbench ignores for ``instance_id``."""
    flt = scored_key_filter(instance_id)
    if flt is None:
        return set(keys)
    active, ignored = flt
    return {k for k in keys if k.split("/", 1)[0] in active and k not in ignored}


def reduce_tests(tests: dict[str, bool], keys: set[str] | None = None) -> float | None:
    """Fraction passed over ``keys`` (default: all of ``tests``); None on an empty key set."""
    use = set(tests) if keys is None else keys & set(tests)
    if not use:
        return None
    return sum(bool(tests[k]) for k in use) / len(use)


def load_scores(path: Path | str, name: str | None = None) -> ScoresFile:
    """Load either registry format; refuse anything else with a one-line reason."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read scores file {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"scores file {path} is not a JSON object of instance ids")
    scores: dict[str, float] = {}
    per_test: dict[str, dict[str, bool]] = {}
    for iid, value in data.items():
        if isinstance(value, bool) or not isinstance(value, int | float | dict):
            raise ValueError(f"scores file {path}: {iid!r} is neither a score nor a test map")
        if isinstance(value, dict):
            tests = {str(k): bool(v) for k, v in value.items()}
            per_test[iid] = tests
            reduced = reduce_tests(tests, current_keys(iid, set(tests)))
            scores[iid] = reduced if reduced is not None else (reduce_tests(tests) or 0.0)
        else:
            if not 0.0 <= float(value) <= 1.0:
                raise ValueError(f"scores file {path}: score of {iid!r} is outside [0, 1]")
            scores[iid] = float(value)
    if per_test and len(per_test) != len(data):
        raise ValueError(f"scores file {path} mixes per-instance and per-test entries")
    fmt: Literal["per_instance", "per_test"] = "per_test" if per_test else "per_instance"
    return ScoresFile(
        path=str(path),
        name=name or path.name.removesuffix(".json").removesuffix(".score"),
        format=fmt,
        scores=scores,
        per_test=per_test or None,
    )


class RunScore(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instance_id: str
    score: float | None  # None: not scored (infra failure, blocked, skipped)
    status: str | None = None
    outcome: str | None = None


def read_run_scores(ledger: Path) -> tuple[dict[str, RunScore], list[RunScore]]:
    """Per-instance scores from ``result_index.jsonl``: ``(scored, unscored)``.

    Last row per instance wins; a torn last line is skipped; garbage elsewhere raises.
    Rows of another benchmark are ignored. An agent that did not complete scores 0 (as the
    official headline counts it); infrastructure failures and blocked/skipped rows without
    a score are left out of the pairing and listed.
    """
    last = {row.instance_id: row for row in read_ledger(ledger).latest.values()
            if row.benchmark == "programbench"}
    scored: dict[str, RunScore] = {}
    unscored: list[RunScore] = []
    for iid, row in sorted(last.items()):
        status, outcome = row.status, row.outcome.value
        value: float | None = None
        if row.score is not None:
            value = float(row.score)
        elif row.outcome is Outcome.AGENT_FAILED:
            value = 0.0
        item = RunScore(instance_id=iid, score=value, status=status, outcome=outcome)
        if value is None:
            unscored.append(item)
        else:
            scored[iid] = item
    return scored, unscored
