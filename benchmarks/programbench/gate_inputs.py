"""What ``harness programbench gate`` reads besides the score files: the Gate-20 task list
(``--tasks``), the host's load while the gate (and the run) ran, and the run's ledger by
task, each task's attempts with the eval.json the run kept for them
(:mod:`benchmarks.programbench.gate` documents the rules)."""

from __future__ import annotations

import functools
import json
import os
from collections import defaultdict
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from benchmarks.programbench.kept_files import kept_files
from benchmarks.programbench.scores import RunScore, read_run_scores
from benchmarks.programbench.tasks import select_instances
from harness.api import (
    ManifestError,
    RunModel,
    TaskRow,
    ledger_path,
    read_json,
    read_ledger,
    read_manifest,
    run_roots,
)

GATE_GROUP_SIZE = 10  # Gate-20: 10 smoke tasks + 10 unseen tasks


class GateRefused(ValueError):
    """The gate cannot decide (exit 2); the message says why and what to do."""


class TaskList(BaseModel):
    """The Gate-20 task list (``--tasks``), recorded in ``gate.json``."""

    model_config = ConfigDict(extra="forbid")

    path: str
    smoke: list[str]
    unseen: list[str]

    @property
    def all(self) -> list[str]:
        return [*self.smoke, *self.unseen]


class HostLoad(BaseModel):
    """1-minute load averages (``os.getloadavg``) while the gate (and the run) ran."""

    model_config = ConfigDict(extra="forbid")

    cpus: int
    max_load_per_cpu: float
    start: list[float]
    end: list[float]
    run_start: list[float] | None = None
    run_end: list[float] | None = None
    peak_per_cpu: float
    overloaded: bool


def load_tasks(path: Path) -> TaskList:
    """``{"smoke": [...], "unseen": [...]}``: 10 distinct ProgramBench ids each."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise GateRefused(f"--tasks {path}: cannot read it ({exc})") from exc
    groups = data if isinstance(data, dict) else {}
    smoke, unseen = groups.get("smoke"), groups.get("unseen")
    known = {inst.instance_id for inst in select_instances()}
    if (
        not isinstance(smoke, list)
        or not isinstance(unseen, list)
        or len(smoke) != GATE_GROUP_SIZE
        or len(unseen) != GATE_GROUP_SIZE
        or set(groups) != {"smoke", "unseen"}
    ):
        raise GateRefused(
            f'--tasks {path} must be {{"smoke": [...], "unseen": [...]}} '
            f"listing {GATE_GROUP_SIZE} smoke and {GATE_GROUP_SIZE} unseen "
            f"instance ids"
        )
    ids = [*smoke, *unseen]
    unknown = sorted(str(i) for i in ids if i not in known)
    if unknown:
        raise GateRefused(f"--tasks {path}: not ProgramBench tasks: {', '.join(unknown)}")
    if len(set(ids)) != len(ids):
        raise GateRefused(f"--tasks {path}: an instance is listed twice")
    return TaskList(path=str(path), smoke=list(smoke), unseen=list(unseen))


def _run_load(run_root: Path) -> tuple[list[float] | None, list[float] | None]:
    try:
        extra = read_json(run_root / "run_manifest.json").get("extra") or {}
    except (OSError, ValueError, AttributeError):
        return None, None
    load = extra.get("host_load") if isinstance(extra, dict) else None
    if not isinstance(load, dict):
        return None, None
    return load.get("start"), load.get("end")


def host_load(
    run_root: Path, start: tuple[float, float, float], max_load_per_cpu: float
) -> HostLoad:
    cpus = os.cpu_count() or 1
    end = os.getloadavg()
    run_start, run_end = _run_load(run_root)
    ones = [start[0], end[0]] + [v[0] for v in (run_start, run_end) if v]
    peak = max(ones) / cpus
    return HostLoad(
        cpus=cpus,
        max_load_per_cpu=max_load_per_cpu,
        start=list(start),
        end=list(end),
        run_start=run_start,
        run_end=run_end,
        peak_per_cpu=round(peak, 4),
        overloaded=peak >= max_load_per_cpu,
    )


class RunTasks(BaseModel):
    """The run's ledger by task: each task's scored attempts and its unscored ones."""

    model_config = ConfigDict(extra="forbid")

    scored: dict[str, list[RunScore]]  # task -> its attempts, all scored (K=1: one)
    unscored: list[RunScore]  # attempts (K=1: instances) without a score
    # task -> why it is not scored: its status (K=1), "attempt (status)" per unscored attempt
    unscored_tasks: dict[str, list[str]]
    attempts_per_task: int  # the most attempts selected for one task
    repeated: bool  # some row is an attempt of a task run more than once (K > 1)
    eval_json: dict[str, Path] = Field(default_factory=dict)  # scored id -> its kept eval.json


def _kept_eval_json(run_root: Path, row: TaskRow) -> Path | None:
    """The eval.json the run kept for ``row``, where the run model says it is (an attempt's
    is under its own folder, ``official_eval/<task>/``, as its row's ``output_paths`` say; a
    merged run's row's is in the shard that ran it; a carried row's in the ancestor that
    scored it), so a resumed or merged run pairs on the same basis as one root that ran the
    same work. None when it is not kept: the pair then uses the row's score."""
    kept = kept_files(row, run_root, _roots(str(run_root)))
    return kept.eval_json() if kept is not None else None


@functools.lru_cache(maxsize=8)
def _roots(run_root: str) -> dict[str, Path]:
    return run_roots(Path(run_root))


def _expected_attempts(run_root: Path) -> dict[str, list[str]]:
    """Task id -> the attempt ids of a repeated run (the run model's units; {} when K=1 or
    the manifest cannot be read)."""
    try:
        model = RunModel.of_manifest(read_manifest(run_root)).benchmark_model("programbench")
    except (ManifestError, OSError, ValueError):
        return {}
    if not model.repeated:
        return {}
    return {task.partition("/")[2]: [u.partition("/")[2] for u in units]
            for task, units in model.units_by_task().items()}


def _sample_order(rows: dict[str, TaskRow], item: RunScore) -> tuple[int, str]:
    row = rows.get(item.instance_id)
    return (row.sample or 0) if row is not None else 0, item.instance_id


def read_run_tasks(run_root: Path) -> RunTasks:
    """The run's per-instance scores (:func:`read_run_scores`) grouped by task. A K=1 run:
    one attempt per task, its instance. A repeated run: a task is scored only when every
    attempt it has (in the ledger, or selected in the manifest) is scored."""
    ledger = ledger_path(run_root)
    scored, unscored = read_run_scores(ledger)
    rows: dict[str, TaskRow] = {
        row.instance_id: row
        for row in read_ledger(ledger).latest.values()
        if row.benchmark == "programbench"
    }
    expected = _expected_attempts(run_root)
    repeated = bool(expected) or any(row.sample_of is not None for row in rows.values())
    task_of = {iid: row.task_id for iid, row in rows.items()}
    by_task: dict[str, list[RunScore]] = defaultdict(list)
    for iid, item in scored.items():
        by_task[task_of.get(iid, iid)].append(item)
    missing: dict[str, list[str]] = defaultdict(list)
    for u in unscored:
        status = u.status or u.outcome or "unscored"
        missing[task_of.get(u.instance_id, u.instance_id)].append(
            f"{u.instance_id} ({status})" if repeated else status
        )
    for task, ids in expected.items():
        missing[task] += [f"{iid} (no row)" for iid in ids if iid not in rows]
    for task, reasons in list(missing.items()):
        if not reasons:
            del missing[task]
        else:
            by_task.pop(task, None)
    per_task = [len(v) for v in by_task.values()] + [len(v) for v in expected.values()]
    evals = {iid: _kept_eval_json(run_root, rows[iid]) for iid in scored if iid in rows}
    return RunTasks(
        scored={
            t: sorted(v, key=lambda r: _sample_order(rows, r)) for t, v in sorted(by_task.items())
        },
        unscored=unscored,
        unscored_tasks=dict(sorted(missing.items())),
        attempts_per_task=max(per_task, default=0),
        repeated=repeated,
        eval_json={iid: path for iid, path in evals.items() if path is not None},
    )
