"""Repeated attempts (``--attempts K``): per-task spread, mean score with its interval, pass@k.

Pure: the run's effective rows (the last row per key) in, a :class:`SampleStats` out. No
pytest, no docker, no numpy; the bootstrap draws indices with ``random.Random(seed)``, whose
sequence Python keeps stable, so the interval is reproducible from its seed.

Which rows count. An *attempt* at a task is a row that settled the task's verdict: a
**settled** row (:attr:`TaskRow.settled`: scored, agent failed, or carried forward from an
ancestor's such row) that is not infrastructure (:func:`harness.core.scoring.row_is_infra`).
An agent failure counts, with score 0 and unresolved: that is the agent's doing. An
infrastructure failure, a blocked or not-attempted row, a session-end eval that never
came, or a selected attempt without a row is *not* an attempt at the task: it is listed as
an **attempt missing** (with its status) and left out of every figure, never counted 0.
Each figure says how many tasks and attempts stand behind it. ``mean_score_missing_zero``
is the other reading, the run's headline rule (every selected attempt, missing ones 0):
the run's manifest ``mean_score`` when each task has the same number of attempts selected.

Grouping: a row is an attempt at ``TaskRow.task_id`` (its ``sample_of``, or its instance
id for a K=1 run), keyed ``benchmark/task_id``. A selected attempt without a row is
placed by its id (``<task>@<k>``).

Figures:

- mean score: the mean over tasks of each task's mean over its attempts; its interval is a
  percentile bootstrap over tasks, each resampled task bringing all its attempts (a cluster
  bootstrap: for this statistic, the bootstrap of the per-task means);
- pass@k for k = 1..K: the unbiased estimator ``1 - C(n-c, k) / C(n, k)`` per task (n
  attempts, c resolved), averaged over the tasks with at least k attempts;
- per task: scores, min, max, mean, solved count; **unstable** when its attempts disagree
  (some resolved and some not, or a score range above ``unstable_range``).

A K=1 run gives today's headline: mean score and pass@1 over its scored instances.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import Field, ValidationError

from harness.core.models import Manifest, StrictModel, TaskRow, instance_key
from harness.core.outcomes import split_attempt as split_attempt
from harness.core.scoring import row_is_infra, row_is_resolved, row_score
from harness.run.model import RunModel

SAMPLES_SCHEMA = "harness.samples.v1"
DEFAULT_RESAMPLES = 10_000
DEFAULT_LEVEL = 0.95
DEFAULT_SEED = 0
DEFAULT_UNSTABLE_RANGE = 0.5
NO_ROW = "no_row"  # a selected attempt without a ledger row
EVAL_PENDING = "official_eval_pending"
# An attempt's id, "<task id>@<k>" (k = 1..K), as harness.core.outcomes spells it.


# --- statistics primitives (reports.stats re-exports them) --------------------------------


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (Hyndman-Fan type 7, numpy's default) of sorted data."""
    if not sorted_values:
        raise ValueError("quantile of an empty sequence")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile level {q} outside [0, 1]")
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def bootstrap_means(
    values: Sequence[float], *, resamples: int = DEFAULT_RESAMPLES, seed: int = 0
) -> list[float]:
    """Means of ``resamples`` resamples (with replacement) of ``values``, sorted."""
    n = len(values)
    if n == 0:
        return []
    if resamples < 1:
        raise ValueError("resamples must be at least 1")
    data = list(values)
    draw = random.Random(seed).random
    means = [sum([data[int(draw() * n)] for _ in range(n)]) / n for _ in range(resamples)]
    means.sort()
    return means


def bootstrap_mean_ci(
    values: Sequence[float],
    *,
    level: float = DEFAULT_LEVEL,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean of ``values``."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level {level} outside (0, 1)")
    means = bootstrap_means(values, resamples=resamples, seed=seed)
    if not means:
        return None
    alpha = (1.0 - level) / 2.0
    return quantile(means, alpha), quantile(means, 1.0 - alpha)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task from ``n`` attempts of which ``c`` resolved (k <= n)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n and 0 <= c <= n (n={n}, c={c})")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


# --- grouping -------------------------------------------------------------------------------


def counts_as_attempt(row: TaskRow) -> bool:
    """A settled, non-infrastructure row: a verdict on the task (see the module doc)."""
    return row.settled and not row_is_infra(row)


@dataclass
class Attempt:
    key: str  # "benchmark/instance_id" of the attempt
    sample: int | None
    score: float
    resolved: bool


@dataclass
class TaskAttempts:
    """One task's selected attempts: those that count and those missing (key -> status)."""

    key: str  # "benchmark/task_id"
    benchmark: str
    task_id: str
    attempts: list[Attempt] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)
    highest_sample: int = 0

    @property
    def expected(self) -> int:
        return len(self.attempts) + len(self.missing)


def _task_of(key: str, row: TaskRow | None) -> tuple[str, str, int | None]:
    if row is not None:
        return row.benchmark, row.task_id, row.sample
    benchmark, _, iid = key.rpartition("/")
    task, sample = split_attempt(iid)
    return benchmark, task, sample


def _missing_reason(row: TaskRow) -> str:
    if row.official_eval_status == "pending" and not row_is_infra(row):
        return EVAL_PENDING  # scored at session end by a batch eval that never came
    return row.status or row.outcome.value


def group_attempts(
    rows: Mapping[str, TaskRow], selection: Sequence[str] | None = None
) -> list[TaskAttempts]:
    """The selected attempts (default: every row's key) grouped by task, sorted by task key;
    each task's attempts in sample order."""
    keys = list(dict.fromkeys(selection)) if selection is not None else sorted(rows)
    tasks: dict[str, TaskAttempts] = {}
    for key in keys:
        row = rows.get(key)
        benchmark, task_id, sample = _task_of(key, row)
        tkey = instance_key(benchmark, task_id)
        task = tasks.get(tkey)
        if task is None:
            task = tasks[tkey] = TaskAttempts(key=tkey, benchmark=benchmark, task_id=task_id)
        task.highest_sample = max(task.highest_sample, sample or 1)
        if row is None:
            task.missing[key] = NO_ROW
        elif counts_as_attempt(row):
            task.attempts.append(Attempt(key, sample, row_score(row), row_is_resolved(row)))
        else:
            task.missing[key] = _missing_reason(row)
    for task in tasks.values():
        task.attempts.sort(key=lambda a: (a.sample is None, a.sample or 0, a.key))
    return [tasks[k] for k in sorted(tasks)]


# --- the figures -----------------------------------------------------------------------------


class MeanInterval(StrictModel):
    """Percentile bootstrap interval of the mean score, resampling tasks (attempts kept)."""

    low: float
    high: float
    level: float
    resamples: int
    seed: int
    method: str = "cluster_bootstrap_percentile"
    tasks: int
    attempts: int


class PassAtK(StrictModel):
    k: int
    value: float | None  # None: no task has k attempts
    tasks: int  # tasks with at least k attempts (the average is over these)
    attempts: int  # their attempts
    tasks_short: int = 0  # scored tasks with fewer than k attempts, left out of this figure


class TaskSpread(StrictModel):
    task: str  # "benchmark/task_id"
    attempts: int  # attempts that count
    expected: int  # selected attempts (counted + missing)
    scores: list[float]  # in sample order
    mean: float | None
    min: float | None
    max: float | None
    solved: int  # resolved attempts
    missing: dict[str, str] = Field(default_factory=dict)  # attempt key -> status ("no_row")
    unstable: bool = False
    why_unstable: list[str] = Field(default_factory=list)


class SampleStats(StrictModel):
    """The repeated-attempt figures of a run (``run_manifest.json`` ``extra.samples``)."""

    schema_: str = Field(default=SAMPLES_SCHEMA, alias="schema")
    k: int  # attempts per task the run asked for (the most selected for one task)
    tasks: int  # tasks selected
    tasks_scored: int  # tasks with at least one attempt that counts
    tasks_unscored: list[str] = Field(default_factory=list)  # the others (all attempts missing)
    attempts_expected: int  # selected attempts
    attempts: int  # attempts that count
    attempts_missing: int
    missing_by_status: dict[str, int] = Field(default_factory=dict)
    attempts_per_task_min: int  # over scored tasks (0 when none)
    attempts_per_task_max: int
    mean_score: float | None  # over the scored tasks
    mean_interval: MeanInterval | None
    mean_score_missing_zero: float | None  # over every selected task, missing attempts 0
    pass_at: list[PassAtK]
    unstable_range: float
    unstable: list[str] = Field(default_factory=list)  # task keys
    per_task: list[TaskSpread] = Field(default_factory=list)

    @property
    def repeated(self) -> bool:
        """More than one attempt per task was asked for (K > 1)."""
        return self.k > 1

    def pass_at_k(self, k: int) -> PassAtK | None:
        return next((p for p in self.pass_at if p.k == k), None)

    def unstable_tasks(self) -> list[TaskSpread]:
        return [t for t in self.per_task if t.unstable]


def _spread(task: TaskAttempts, unstable_range: float) -> TaskSpread:
    scores = [a.score for a in task.attempts]
    solved = sum(1 for a in task.attempts if a.resolved)
    n = len(scores)
    why: list[str] = []
    if n >= 2:
        if 0 < solved < n:
            why.append(f"solved {solved} of {n}")
        spread = max(scores) - min(scores)
        if spread > unstable_range:
            why.append(f"score range {spread:.2f} > {unstable_range:g}")
    return TaskSpread(
        task=task.key,
        attempts=n,
        expected=task.expected,
        scores=scores,
        mean=sum(scores) / n if n else None,
        min=min(scores) if n else None,
        max=max(scores) if n else None,
        solved=solved,
        missing=dict(task.missing),
        unstable=bool(why),
        why_unstable=why,
    )


def _pass_at(spreads: Sequence[TaskSpread], k: int) -> PassAtK:
    scored = [t for t in spreads if t.attempts]
    able = [t for t in scored if t.attempts >= k]
    values = [pass_at_k(t.attempts, t.solved, k) for t in able]
    return PassAtK(
        k=k,
        value=sum(values) / len(values) if values else None,
        tasks=len(able),
        attempts=sum(t.attempts for t in able),
        tasks_short=len(scored) - len(able),
    )


def asked_k(tasks: Sequence[TaskAttempts]) -> int:
    """K: the attempts per task the run asked for (or the highest attempt seen)."""
    return max((max(t.expected, t.highest_sample) for t in tasks), default=0)


def sample_stats(
    rows: Mapping[str, TaskRow],
    selection: Sequence[str] | None = None,
    *,
    attempts: int | None = None,
    unstable_range: float = DEFAULT_UNSTABLE_RANGE,
    level: float = DEFAULT_LEVEL,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> SampleStats:
    """The figures of the selected attempts (``selection``: attempt keys "benchmark/iid";
    default every key of ``rows``) from ``rows``, the effective row per key; ``attempts``: K
    as the run model says it (default: the highest attempt selected or seen)."""
    if unstable_range < 0:
        raise ValueError(f"unstable range {unstable_range} must be >= 0")
    tasks = group_attempts(rows, selection)
    spreads = [_spread(t, unstable_range) for t in tasks]
    scored = [s for s in spreads if s.attempts]
    means = [s.mean for s in scored if s.mean is not None]
    counted = sum(s.attempts for s in scored)
    ci = bootstrap_mean_ci(means, level=level, resamples=resamples, seed=seed)
    interval = None
    if ci is not None:
        interval = MeanInterval(
            low=ci[0],
            high=ci[1],
            level=level,
            resamples=resamples,
            seed=seed,
            tasks=len(means),
            attempts=counted,
        )
    k = attempts or asked_k(tasks)
    missing = Counter(status for t in tasks for status in t.missing.values())
    over_selection = [sum(a.score for a in t.attempts) / t.expected for t in tasks if t.expected]
    return SampleStats(
        k=k,
        tasks=len(tasks),
        tasks_scored=len(scored),
        tasks_unscored=[s.task for s in spreads if not s.attempts],
        attempts_expected=sum(t.expected for t in tasks),
        attempts=counted,
        attempts_missing=sum(missing.values()),
        missing_by_status=dict(sorted(missing.items(), key=lambda kv: (-kv[1], kv[0]))),
        attempts_per_task_min=min((s.attempts for s in scored), default=0),
        attempts_per_task_max=max((s.attempts for s in scored), default=0),
        mean_score=sum(means) / len(means) if means else None,
        mean_interval=interval,
        mean_score_missing_zero=(
            sum(over_selection) / len(over_selection) if over_selection else None
        ),
        pass_at=[_pass_at(spreads, j) for j in range(1, k + 1)],
        unstable_range=unstable_range,
        unstable=[s.task for s in spreads if s.unstable],
        per_task=spreads,
    )


def summary_line(stats: SampleStats) -> str:
    """One line for the terminal: K, tasks and attempts, mean with its interval, pass@1 and
    pass@K, unstable tasks, missing attempts."""
    parts = [
        f"attempts: K={stats.k}, {stats.tasks_scored} task(s) scored with {stats.attempts} "
        f"attempt(s) ({stats.attempts_per_task_min}-{stats.attempts_per_task_max} per task)"
    ]
    if stats.mean_score is not None:
        ci = stats.mean_interval
        interval = (
            f" [{ci.low:.4f}, {ci.high:.4f}] {ci.level:.0%} CI (bootstrap over tasks)"
            if ci is not None
            else ""
        )
        parts.append(f"mean score {stats.mean_score:.4f}{interval}")
    shown = [
        f"pass@{p.k} {p.value:.4f} ({p.tasks} tasks)"
        for p in stats.pass_at
        if p.k in (1, stats.k) and p.value is not None
    ]
    if shown:
        parts.append(", ".join(shown))
    parts.append(f"{len(stats.unstable)} unstable task(s)")
    if stats.attempts_missing:
        parts.append(f"{stats.attempts_missing} attempt(s) missing, not counted")
    return "; ".join(parts)


def model_stats(model: RunModel, rows: Mapping[str, TaskRow], *,
                resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED
                ) -> SampleStats | None:
    """The figures of a run with K > 1 attempts per task (the run model's units and K);
    None for K = 1 (no bootstrap to pay: seconds at 2,000 tasks)."""
    if not model.repeated:
        return None
    stats = sample_stats(rows, model.units, attempts=model.attempts, resamples=resamples,
                         seed=seed)
    return stats if stats.repeated else None


def record_samples(manifest: Manifest, rows: Mapping[str, TaskRow]) -> None:
    """Session end: write the figures into ``manifest.extra.samples`` when the run asked for
    more than one attempt per task (a K=1 run's manifest is left as it was). A failure is
    recorded in ``extra.finish_errors``, never raised: the manifest must still be finalized."""
    try:
        stats = model_stats(RunModel.of_manifest(manifest), rows)
    except Exception as exc:
        extra = manifest.extra
        extra.finish_errors = [
            *(extra.finish_errors or []),
            f"samples: {type(exc).__name__}: {exc}"[:2000],
        ]
        return
    if stats is not None:
        manifest.extra.samples = stats.model_dump(mode="json", by_alias=True)


def recorded_samples(manifest: Manifest) -> SampleStats | None:
    """The figures :func:`record_samples` wrote, None when absent or unreadable."""
    raw = manifest.extra.samples
    if raw is None:
        return None
    try:
        return SampleStats.model_validate(raw)
    except ValidationError:
        return None
