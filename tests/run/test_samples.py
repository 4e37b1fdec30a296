"""Repeated-attempt figures (harness.run.samples) against computations written here.

pass@k is checked against enumerating every k-subset of a task's attempts; the interval
against the exact bootstrap distribution (every one of the n^n equally likely resamples of
n tasks, enumerated), against a closed form (Binomial(10, 1/2) / 10 when whole tasks are 0
or 1), and against a cluster bootstrap written separately from the module's.
"""

from __future__ import annotations

import itertools
import json
import random
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.core.models import Outcome, TaskRow
from harness.run.ledger import LedgerRead, tally
from harness.run.samples import (
    DEFAULT_UNSTABLE_RANGE,
    SampleStats,
    pass_at_k,
    record_samples,
    recorded_samples,
    sample_stats,
    split_attempt,
    summary_line,
)
from harness.runner.summary import print_summary
from tests.reports.attempt_runs import AGENT_FAILED, INFRA, attempt_row, attempt_rows, scored
from tests.reports.report_runs import manifest_for, row

B = "programbench"


def _stats(rows: list[TaskRow], selection: list[str] | None = None, **kw: object) -> SampleStats:
    return sample_stats(LedgerRead(rows).latest, selection, **kw)  # type: ignore[arg-type]


# --- pass@k ------------------------------------------------------------------------------


def brute_pass_at_k(outcomes: list[bool], k: int) -> Fraction:
    """The share of k-subsets of the attempts with at least one resolved (by enumeration)."""
    subsets = list(itertools.combinations(range(len(outcomes)), k))
    hits = sum(1 for s in subsets if any(outcomes[i] for i in s))
    return Fraction(hits, len(subsets))


@pytest.mark.parametrize("n", range(1, 8))
def test_pass_at_k_is_the_share_of_k_subsets_with_a_success(n: int) -> None:
    for c in range(n + 1):
        outcomes = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(float(brute_pass_at_k(outcomes, k)))


def test_pass_at_k_refuses_k_above_n() -> None:
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)


def test_run_pass_at_k_averages_over_the_tasks_with_k_attempts() -> None:
    tasks = {
        "a": [1.0, 0.0, 0.0, 1.0],
        "b": [0.0, 0.0, 0.0, 0.0],
        "c": [1.0, 1.0, 1.0, 1.0],
        "d": [0.0, 1.0, 0.3],  # its 4th attempt is infra: three attempts count
        "e": [0.2, 0.9, 1.0, 0.0],
    }
    rows = attempt_rows(tasks)
    rows.append(attempt_row(B, "d", 4, **INFRA))
    stats = _stats(rows)
    assert stats.k == 4 and stats.tasks == 5 and stats.attempts == 19
    assert stats.attempts_missing == 1 and stats.missing_by_status == {"infra_failed": 1}
    outcomes = {t: [s >= 1.0 for s in v] for t, v in tasks.items()}
    for k in range(1, 5):
        able = [o for o in outcomes.values() if len(o) >= k]
        expected = sum(float(brute_pass_at_k(o, k)) for o in able) / len(able)
        p = stats.pass_at_k(k)
        assert p is not None and p.value == pytest.approx(expected)
        assert p.tasks == len(able) and p.attempts == sum(len(o) for o in able)
        assert p.tasks_short == 5 - len(able)
    p1 = stats.pass_at_k(1)
    assert p1 is not None and p1.value == pytest.approx(
        sum(sum(o) / len(o) for o in outcomes.values()) / 5
    )


# --- the interval --------------------------------------------------------------------------


def exact_bootstrap(tasks: list[list[float]]) -> list[tuple[float, Fraction]]:
    """The exact distribution of the mean of task means over all n^n resamples of tasks."""
    n = len(tasks)
    task_means = [sum(t) / len(t) for t in tasks]
    weight = Fraction(1, n**n)
    dist: dict[float, Fraction] = {}
    for picks in itertools.product(range(n), repeat=n):
        value = round(sum(task_means[i] for i in picks) / n, 12)
        dist[value] = dist.get(value, Fraction(0)) + weight
    return sorted(dist.items())


def mass(dist: list[tuple[float, Fraction]], below: float, *, inclusive: bool) -> float:
    eps = 1e-9
    return float(
        sum(
            (p for v, p in dist if (v <= below + eps if inclusive else v < below - eps)),
            Fraction(0),
        )
    )


def test_interval_is_the_percentile_of_the_exact_cluster_bootstrap() -> None:
    tasks = {
        "a": [1.0, 0.9, 1.0],
        "b": [0.0, 0.1],
        "c": [0.5, 0.0, 1.0, 0.7],
        "d": [0.25],
        "e": [0.8, 0.6, 0.9],
    }
    stats = _stats(attempt_rows(tasks), resamples=20_000, seed=7)
    ci = stats.mean_interval
    assert ci is not None and ci.tasks == 5 and ci.attempts == 13
    assert stats.mean_score == pytest.approx(sum(sum(v) / len(v) for v in tasks.values()) / 5)
    dist = exact_bootstrap(list(tasks.values()))
    tol = 0.01  # Monte Carlo error of a 2.5% point from 20,000 resamples is about 0.0011
    for point, q in ((ci.low, 0.025), (ci.high, 0.975)):
        assert mass(dist, point, inclusive=False) <= q + tol
        assert mass(dist, point, inclusive=True) >= q - tol


def test_interval_resamples_whole_tasks_not_attempts() -> None:
    # 10 tasks of 5 identical attempts, half all-solved: the task-level mean is
    # Binomial(10, 1/2) / 10, whose 2.5% and 97.5% points are 0.2 and 0.8
    # (P(X <= 1) = 11/1024 < 2.5% < P(X <= 2) = 56/1024). Resampling the 50 attempts
    # instead would give about [0.36, 0.64].
    tasks = {f"t{i}": [float(i % 2)] * 5 for i in range(10)}
    stats = _stats(attempt_rows(tasks))
    ci = stats.mean_interval
    assert ci is not None and ci.attempts == 50 and ci.tasks == 10
    assert ci.low == pytest.approx(0.2) and ci.high == pytest.approx(0.8)


def cluster_bootstrap(tasks: list[list[float]], resamples: int, seed: int) -> tuple[float, float]:
    """A cluster bootstrap written from its definition: draw n tasks with replacement (each
    with all its attempts), take the mean over drawn tasks of their attempt means; the
    95% percentile interval of those (linear interpolation)."""
    rng = random.Random(seed)
    n = len(tasks)
    stats = []
    for _ in range(resamples):
        drawn = [tasks[int(rng.random() * n)] for _ in range(n)]
        stats.append(sum(sum(t) / len(t) for t in drawn) / n)
    stats.sort()

    def pct(q: float) -> float:
        pos = (len(stats) - 1) * q
        lo = int(pos)
        hi = min(lo + 1, len(stats) - 1)
        return stats[lo] + (stats[hi] - stats[lo]) * (pos - lo)

    return pct(0.025), pct(0.975)


def test_interval_matches_a_separately_written_cluster_bootstrap_and_its_seed() -> None:
    rng = random.Random(3)
    tasks = {
        f"t{i:02d}": [round(rng.random(), 2) for _ in range(rng.randint(1, 5))] for i in range(30)
    }
    stats = _stats(attempt_rows(tasks), resamples=3000, seed=11)
    ci = stats.mean_interval
    assert ci is not None and ci.seed == 11 and ci.resamples == 3000
    low, high = cluster_bootstrap([tasks[t] for t in sorted(tasks)], 3000, 11)
    assert (ci.low, ci.high) == (pytest.approx(low), pytest.approx(high))
    assert ci.low <= (stats.mean_score or 0) <= ci.high
    means = [sum(v) / len(v) for v in tasks.values()]
    assert min(means) <= ci.low and ci.high <= max(means)
    again = _stats(attempt_rows(tasks), resamples=3000, seed=11).mean_interval
    assert again is not None and (again.low, again.high) == (ci.low, ci.high)


def test_constant_scores_give_a_zero_width_interval() -> None:
    stats = _stats(attempt_rows({"a": [0.5, 0.5], "b": [0.5]}), resamples=200)
    ci = stats.mean_interval
    assert ci is not None and ci.low == ci.high == 0.5


# --- unstable tasks ------------------------------------------------------------------------


def test_unstable_tasks_disagree_on_resolution_or_spread_over_the_threshold() -> None:
    tasks = {
        "solved-once": [1.0, 0.9, 0.95],  # solved 1 of 3, range 0.1
        "wide": [0.21, 0.91],  # range 0.70 > 0.5, never solved
        "narrow": [0.3, 0.7],  # range 0.4: stable
        "edge": [0.25, 0.75],  # range exactly 0.5: stable (strictly above)
        "always": [1.0, 1.0, 1.0],
        "never": [0.0, 0.0],
        "single": [0.5],
    }
    stats = _stats(attempt_rows(tasks), resamples=100)
    assert stats.unstable_range == DEFAULT_UNSTABLE_RANGE
    assert stats.unstable == [f"{B}/solved-once", f"{B}/wide"]
    by = {t.task: t for t in stats.per_task}
    assert by[f"{B}/solved-once"].why_unstable == ["solved 1 of 3"]
    assert by[f"{B}/wide"].why_unstable == ["score range 0.70 > 0.5"]
    wide = by[f"{B}/wide"]
    assert (wide.min, wide.max, wide.solved, wide.scores) == (0.21, 0.91, 0, [0.21, 0.91])
    assert wide.mean == pytest.approx(0.56)
    tighter = _stats(attempt_rows(tasks), resamples=100, unstable_range=0.3)
    assert tighter.unstable == [f"{B}/edge", f"{B}/narrow", f"{B}/solved-once", f"{B}/wide"]
    with pytest.raises(ValueError):
        _stats(attempt_rows(tasks), unstable_range=-0.1)


def test_an_infra_attempt_is_missing_not_a_disagreement() -> None:
    rows = [
        attempt_row(B, "t", 1, **scored(1.0)),
        attempt_row(B, "t", 2, **INFRA),
        attempt_row(B, "t", 3, **scored(1.0)),
    ]
    stats = _stats(rows, resamples=100)
    assert stats.unstable == []
    [t] = stats.per_task
    assert t.attempts == 2 and t.expected == 3 and t.solved == 2
    assert list(t.missing.values()) == ["infra_failed"]


# --- which rows count ----------------------------------------------------------------------


def test_which_rows_count_as_attempts() -> None:
    rows = [
        attempt_row(B, "t", 1, **scored(0.5)),
        attempt_row(B, "t", 2, **AGENT_FAILED),  # the agent's failure: counts, score 0
        attempt_row(B, "t", 3, status="blocked", outcome=Outcome.BLOCKED, score=None),
        attempt_row(B, "u", 1, **INFRA),
        attempt_row(B, "u", 2, **INFRA),
        attempt_row(B, "v", 1, **scored(1.0), official_eval_status="pending"),  # eval never came
        attempt_row(
            B,
            "v",
            2,
            status="completed",
            outcome=Outcome.CARRIED,
            score=1.0,
            resolved=True,
            carried_from="run-0",
            details={"carried_status": "completed"},
        ),
    ]
    selection = [r.key for r in rows] + [f"{B}/v@3"]  # the third attempt at v never wrote a row
    stats = _stats(rows, selection, resamples=100)
    by = {t.task: t for t in stats.per_task}
    assert by[f"{B}/t"].scores == [0.5, 0.0] and by[f"{B}/t"].expected == 3
    assert by[f"{B}/v"].scores == [1.0] and by[f"{B}/v"].expected == 3
    assert set(by[f"{B}/v"].missing.values()) == {"official_eval_pending", "no_row"}
    assert stats.tasks == 3 and stats.tasks_scored == 2 and stats.tasks_unscored == [f"{B}/u"]
    assert stats.attempts_expected == 8 and stats.attempts == 3 and stats.attempts_missing == 5
    assert stats.missing_by_status == {
        "infra_failed": 2,
        "blocked": 1,
        "no_row": 1,
        "official_eval_pending": 1,
    }
    assert stats.mean_score == pytest.approx((0.25 + 1.0) / 2)
    # the headline's reading: every selected attempt, missing ones 0, over every task
    assert stats.mean_score_missing_zero == pytest.approx((0.5 / 3 + 0.0 + 1.0 / 3) / 3)
    assert (stats.attempts_per_task_min, stats.attempts_per_task_max) == (1, 2)
    assert stats.k == 3


def test_attempt_ids_and_rows_outside_the_selection() -> None:
    assert split_attempt("abc.1f2@12") == ("abc.1f2", 12)
    assert split_attempt("abc") == ("abc", None)
    assert split_attempt("a@b") == ("a@b", None)
    rows = attempt_rows({"a": [1.0, 0.0], "b": [0.5, 0.5]})
    stats = _stats(rows, [r.key for r in rows if r.sample_of == "a"], resamples=100)
    assert stats.tasks == 1 and stats.attempts == 2


# --- K=1: today's headline -----------------------------------------------------------------


def _k1_rows() -> list[TaskRow]:
    return [
        row(f"{B}/a", score=1.0, resolved=True),
        row(f"{B}/b", score=0.4),
        row(f"{B}/c", status="failed", outcome=Outcome.AGENT_FAILED, score=None),
        row(f"{B}/d", score=0.9),
    ]


def test_k1_run_gives_the_headline_of_today() -> None:
    rows = _k1_rows()
    latest = LedgerRead(rows).latest
    keys = list(latest)
    stats = sample_stats(latest, keys, resamples=100)
    assert stats.k == 1 and not stats.repeated
    assert stats.tasks == stats.attempts == 4 and stats.unstable == []
    assert stats.mean_score == pytest.approx(tally(keys, latest).mean_score)
    assert stats.mean_score_missing_zero == pytest.approx(tally(keys, latest).mean_score)
    p1 = stats.pass_at_k(1)
    assert p1 is not None and p1.value == pytest.approx(1 / 4) and p1.attempts == 4
    assert [p.k for p in stats.pass_at] == [1]
    # an infra row and a missing instance: the headline counts them 0 over the selection
    infra = row(f"{B}/e", status="infra_failed", outcome=Outcome.INFRA_FAILED, infra=True)
    latest[infra.key] = infra
    keys += [infra.key, f"{B}/f"]
    stats = sample_stats(latest, keys, resamples=100)
    assert stats.mean_score_missing_zero == pytest.approx(tally(keys, latest).mean_score)
    assert stats.mean_score == pytest.approx((1.0 + 0.4 + 0.0 + 0.9) / 4)
    assert stats.attempts_missing == 2 and stats.k == 1


def test_manifest_section_only_for_repeated_runs(tmp_path: Path) -> None:
    k1 = manifest_for(tmp_path, "run-a", [r.key for r in _k1_rows()])
    before = k1.model_dump_json(by_alias=True)
    record_samples(k1, LedgerRead(_k1_rows()).latest)
    assert k1.model_dump_json(by_alias=True) == before  # a K=1 manifest is left as it was
    assert "samples" not in json.loads(before)["extra"]

    rows = attempt_rows({"a": [1.0, 0.0, 1.0], "b": [0.2, 0.3, 0.1]})
    keys = [r.key for r in rows]
    m = manifest_for(tmp_path, "run-k", keys)
    record_samples(m, LedgerRead(rows).latest)
    raw = json.loads(m.model_dump_json(by_alias=True))["extra"]["samples"]
    assert raw["schema"] == "harness.samples.v1" and raw["k"] == 3
    stats = recorded_samples(m)
    assert stats is not None and stats.unstable == [f"{B}/a"]
    assert stats == sample_stats(LedgerRead(rows).latest, keys)


def test_summary_line_names_the_attempts_behind_each_figure() -> None:
    rows = attempt_rows({"a": [1.0, 0.0, 1.0], "b": [0.2, 0.3, 0.1]})
    rows.append(attempt_row(B, "c", 1, **INFRA))
    line = summary_line(_stats(rows, resamples=200))
    assert line.startswith("attempts: K=3, 2 task(s) scored with 6 attempt(s) (3-3 per task)")
    assert "mean score 0.4333 [" in line and "95% CI (bootstrap over tasks)" in line
    assert "pass@1 0.3333 (2 tasks)" in line and "pass@3 0.5000 (2 tasks)" in line
    assert "1 unstable task(s)" in line and "1 attempt(s) missing, not counted" in line


# --- the terminal summary ------------------------------------------------------------------


class Terminal:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def section(self, title: str, **kw: object) -> None:
        self.lines.append(f"== {title}")

    def write_line(self, line: str) -> None:
        self.lines.append(line)


def _controller(rows: list[TaskRow], tmp_path: Path, *, record: bool) -> SimpleNamespace:
    keys = [r.key for r in rows]
    latest = LedgerRead(rows).latest
    m = manifest_for(tmp_path, "run-s", keys, mean_score=tally(keys, latest).mean_score)
    if record:
        record_samples(m, latest)
    return SimpleNamespace(
        manifest=m, rows=latest, selection=keys, report_path=None, report_error=None
    )


@pytest.mark.parametrize("record", [True, False])
def test_summary_prints_one_more_line_only_for_repeated_runs(tmp_path: Path, record: bool) -> None:
    k1 = Terminal()
    print_summary(k1, _controller(_k1_rows(), tmp_path, record=record))  # type: ignore[arg-type]
    assert not any(line.startswith("attempts:") for line in k1.lines)
    assert k1.lines[:3] == [
        "== harness run",
        "run run-s: 4 selected; no rows",
        "mean score 0.5750 over 4 (missing counts 0)",
    ]
    k3 = Terminal()
    rows = attempt_rows({"a": [1.0, 0.0, 1.0], "b": [0.2, 0.3, 0.1]})
    print_summary(k3, _controller(rows, tmp_path, record=record))  # type: ignore[arg-type]
    assert k3.lines[2] == "mean score 0.4333 over 6 (missing counts 0)"
    assert k3.lines[3].startswith("attempts: K=3, 2 task(s) scored with 6 attempt(s)")
    assert k3.lines[4:] == k1.lines[3:]  # the rest as before
