"""The run model: what a run is, said once, for every tool to read.

A run is a set of **tasks** (benchmark and task id), **K attempts** of each, so its
**units** are task x attempt (``benchmark/task`` when K=1, else ``benchmark/task@k``), and
an optional **shard**: a share of the tasks, never of the attempts, so all attempts of a task
are in that task's shard, also after a resume raises K. The model is read from a run's
manifest (its frozen selection and ``extra.attempts``); resume, shards, merge and the subset
notice use it instead of working the run out from argv, a glob or a hash of a key.

Pure logic: no pytest, no pydantic at import (the file models load when a manifest is read).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, cast

from harness.core.outcomes import attempt_id, instance_key, split_attempt

if TYPE_CHECKING:
    from harness.core.models import Manifest, ShardSpec, TaskRow


def task_key(key: str) -> str:
    """``benchmark/task`` of a unit's key (an attempt's key names its task)."""
    benchmark, _, iid = key.partition("/")
    return instance_key(benchmark, split_attempt(iid)[0])


def unit_key(task: str, attempt: int, attempts: int) -> str:
    """The key of attempt ``attempt`` (1-based) of ``task`` (``benchmark/task``) in a run of
    ``attempts`` per task: the task's own key when K=1."""
    benchmark, _, task_id = task.partition("/")
    return instance_key(benchmark, attempt_id(task_id, None if attempts == 1 else attempt))


def shard_of(key: str, count: int) -> int:
    """1-based shard of a unit: a stable hash of its **task** (same on every machine), so
    every attempt of a task is in one shard."""
    digest = hashlib.sha256(task_key(key).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count + 1


def in_shard(key: str, shard: ShardSpec | None) -> bool:
    return shard is None or shard_of(key, shard.count) == shard.index


SettingSource = Literal["given", "inherited", "default"]
# What a resume takes from its ancestor when this run does not give it: K, the selection,
# the shard (see harness.runner.selection.resolve_attempts and harness.run.resume).
INHERITED_ON_RESUME = ("--attempts", "--instance", "--task-file", "--shard")


def given_options(args: Sequence[str]) -> list[str]:
    """The long options named in a pytest command line (``--x`` and ``--x=v``), in order."""
    out: list[str] = []
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("--") and len(arg) > 2:
            out.append(arg.split("=", 1)[0])
    return list(dict.fromkeys(out))


def setting_sources(args: Sequence[str], *, resumed: bool) -> dict[str, SettingSource]:
    """Where each of a run's non-default settings came from: ``given`` on its command line,
    or ``inherited`` from the ancestor a resume continues; every option not named is its
    default (:meth:`RunModel.source`)."""
    out: dict[str, SettingSource] = {name: "given" for name in given_options(args)}
    if resumed:
        for name in INHERITED_ON_RESUME:
            out.setdefault(name, "inherited")
    return out


def highest_attempt(keys: Iterable[str]) -> int:
    """The highest attempt number among unit keys (1 when none names an attempt): K of a
    manifest written before ``extra.attempts`` was recorded."""
    return max((split_attempt(k.partition("/")[2])[1] or 1 for k in keys), default=1)


@dataclass(frozen=True)
class RunModel:
    """Tasks, attempts per task (K) and shard of one run; its units follow from them."""

    tasks: tuple[str, ...]  # ``benchmark/task``, in selection order, each once
    attempts: int = 1
    shard: ShardSpec | None = None
    # option -> where its value came from (see setting_sources); absent: the default
    settings: Mapping[str, SettingSource] = field(default_factory=dict, compare=False)
    # the units a frozen selection named, when it named some attempts only (``-k task@1``)
    selected: tuple[str, ...] | None = None

    @classmethod
    def of_keys(cls, keys: Iterable[str], attempts: int = 1,
                shard: ShardSpec | None = None) -> RunModel:
        return cls(tuple(dict.fromkeys(task_key(k) for k in keys)), max(1, attempts), shard)

    @classmethod
    def of_manifest(cls, manifest: Manifest) -> RunModel:
        """The model a run's manifest records: its frozen selection's tasks, its K."""
        keys = manifest.selection.instance_ids
        model = cls.of_keys(keys, manifest.extra.attempts or highest_attempt(keys),
                            manifest.shard)
        settings = cast(dict[str, SettingSource], dict(manifest.extra.settings or {}))
        named = tuple(dict.fromkeys(keys))
        selected = named if set(named) != set(model.units) else None
        return cls(model.tasks, model.attempts, model.shard, settings, selected)

    def source(self, option: str) -> SettingSource:
        """Where this run's ``option`` (``--attempts``) came from."""
        return self.settings.get(option, "default")

    @property
    def units(self) -> list[str]:
        """Every unit, all first attempts first (then all second ones, ...); a selection that
        named some attempts only: those, in its order."""
        if self.selected is not None:
            return list(self.selected)
        return [unit_key(t, k, self.attempts) for k in range(1, self.attempts + 1)
                for t in self.tasks]

    @property
    def repeated(self) -> bool:
        """More than one attempt per task (K > 1)."""
        return self.attempts > 1

    def units_by_task(self) -> dict[str, list[str]]:
        """Task -> its units, in attempt order."""
        out: dict[str, list[str]] = {t: [] for t in self.tasks}
        for unit in sorted(self.units, key=lambda u: split_attempt(u)[1] or 1):
            out[task_key(unit)].append(unit)
        return out

    def benchmark_model(self, benchmark: str) -> RunModel:
        """The part of the run that is one benchmark's (same K and shard)."""
        def mine(key: str) -> bool:
            return key.split("/", 1)[0] == benchmark

        selected = None if self.selected is None else tuple(filter(mine, self.selected))
        return RunModel(tuple(filter(mine, self.tasks)), self.attempts, self.shard,
                        self.settings, selected)

    def tasks_by_benchmark(self) -> dict[str, int]:
        return dict(Counter(t.split("/", 1)[0] for t in self.tasks))

    def missing(self, latest: Mapping[str, TaskRow]) -> list[str]:
        """The units without a row in ``latest`` (the last row per key)."""
        return [u for u in self.units if u not in latest]

    def notice(self, sizes: Mapping[str, int | None]) -> str | None:
        """``"12 of 200 tasks, 3 attempts each: not the benchmark score"`` for each benchmark
        whose selection has fewer tasks than the whole benchmark; None when every one is
        whole (tasks are counted, never attempts)."""
        return subset_notice(self.tasks_by_benchmark(), sizes, self.attempts)


def subset_notice(tasks: Mapping[str, int], sizes: Mapping[str, int | None],
                  attempts: int = 1) -> str | None:
    """See :meth:`RunModel.notice` (``tasks``: selected tasks per benchmark)."""
    parts = [f"{count} of {sizes[name]} tasks" for name, count in sorted(tasks.items())
             if sizes.get(name) is not None and count != sizes[name]]
    if not parts:
        return None
    each = f", {attempts} attempts each" if attempts > 1 else ""
    return f"{', '.join(parts)}{each}: not the benchmark score"
