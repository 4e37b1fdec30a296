"""``harness shard-plan``: how many shards a selection needs so that no shard outlives its CI
job.

A shard's ``-n W`` workers run its units W at a time, each for at most the task timeout
plus the eval and teardown after it (``--eval-minutes``). So a job of ``--job-minutes``,
less ``--setup-minutes`` for checkout, install and images, fits ``rounds`` =
floor((job - setup) / (task + eval)) units per worker, ``rounds * W`` per shard. Shards are
the run model's stable hash of the task (:func:`harness.run.model.shard_of`), so they are
not equal: the plan is the smallest N whose *largest* shard fits. The units are the run
model's (:meth:`RunModel.of_manifest`) of a dry run of the selection (``--run ROOT``: the
keys the runner itself froze, attempts included; nothing re-derived from node ids).

Output: ``key=value`` lines for ``$GITHUB_OUTPUT`` (``count``, ``shards`` as a JSON list,
``units``, ``largest``, ``capacity``). Refused in one line, exit 2: a task timeout that
does not fit the job once, an empty selection, or ``--shards N`` below the plan's.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.run.manifest import ManifestError, read_manifest
from harness.run.model import RunModel, shard_of


class ShardPlanError(ValueError):
    """The selection cannot be split to fit the job; the message names the fix."""


@dataclass(frozen=True)
class ShardPlan:
    count: int
    units: int
    largest: int
    capacity: int

    def lines(self) -> list[str]:
        return [f"count={self.count}",
                f"shards={json.dumps(list(range(1, self.count + 1)))}",
                f"units={self.units}", f"largest={self.largest}",
                f"capacity={self.capacity}"]


def unit_keys(run_root: Path) -> list[str]:
    """The units of the run at ``run_root`` (a dry run of the selection), as its run model
    has them."""
    try:
        return RunModel.of_manifest(read_manifest(run_root)).units
    except ManifestError as exc:
        raise ShardPlanError(f"--run {run_root}: {exc}") from None


def capacity(workers: int, task_minutes: float, job_minutes: float, setup_minutes: float,
             eval_minutes: float) -> int:
    rounds = int((job_minutes - setup_minutes) // (task_minutes + eval_minutes))
    if rounds < 1:
        raise ShardPlanError(
            f"a task of {task_minutes:g} min plus {eval_minutes:g} min of eval does not fit a "
            f"job of {job_minutes:g} min less {setup_minutes:g} min of setup: lower "
            "task_timeout_min (or raise the job's timeout-minutes on self-hosted runners)")
    return rounds * workers


def plan(keys: Sequence[str], cap: int, at_least: int | None = None) -> ShardPlan:
    """The smallest shard count (at least ``at_least``) whose largest shard holds at most
    ``cap`` units."""
    if not keys:
        raise ShardPlanError("the selection holds no instance: check the benchmark, select "
                             "and extra_args inputs")
    for count in range(max(1, at_least or 1), len(keys) + 1):
        sizes = Counter(shard_of(k, count) for k in keys)
        largest = max(sizes.values())
        if largest <= cap:
            return ShardPlan(count, len(keys), largest, cap)
    raise ShardPlanError(  # one task's K attempts share a shard: K above the capacity
        f"no shard count fits: one task's attempts alone exceed {cap} units per shard; "
        "lower attempts or task_timeout_min")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harness shard-plan", description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True, type=Path, metavar="ROOT",
                   help="a dry run of the selection (its run model's units)")
    p.add_argument("--workers", type=int, required=True, help="-n of each shard")
    p.add_argument("--task-minutes", type=float, required=True, help="the task timeout")
    p.add_argument("--job-minutes", type=float, default=350.0,
                   help="the shard job's timeout-minutes (default 350: GitHub's 6 h cap)")
    p.add_argument("--setup-minutes", type=float, default=20.0)
    p.add_argument("--eval-minutes", type=float, default=15.0)
    p.add_argument("--shards", default="auto",
                   help="auto, or a number: refused when below the plan's")
    return p


def shard_plan_command(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.workers < 1:
            raise ShardPlanError(f"--workers {args.workers}: give at least 1")
        asked = None if args.shards in ("", "auto") else args.shards
        if asked is not None and (not asked.isdigit() or int(asked) < 1):
            raise ShardPlanError(f"shards {asked!r} is not auto or a number >= 1")
        cap = capacity(args.workers, args.task_minutes, args.job_minutes,
                       args.setup_minutes, args.eval_minutes)
        keys = unit_keys(args.run)
        found = plan(keys, cap, int(asked) if asked is not None else None)
        if asked is not None and found.count != int(asked):
            fewest = plan(keys, cap).count
            raise ShardPlanError(
                f"shards {asked} does not fit: {found.units} units at {cap} per shard need "
                f"{fewest} shards, and {found.count} is the first count from {asked} whose "
                f"largest shard fits (give shards: auto or {found.count})")
    except ShardPlanError as exc:
        print(f"harness shard-plan: {exc}", file=sys.stderr)
        return 2
    print("\n".join(found.lines()))
    return 0
