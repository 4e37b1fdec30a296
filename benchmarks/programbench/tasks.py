"""ProgramBench instances from the installed ``programbench`` package, and their selection.

Loading reads ``programbench/data/tasks/*/task.yaml`` through the package's own loader
(``programbench.utils.load_data.load_all_instances``) and is cached per process (every
xdist worker collects all 201 instances) and on disk (the parsed instances, keyed by the
task files' sizes and mtimes): collection does not parse 201 YAML files each time.

Selection mirrors ``programbench.utils.instance_filters.filter_instances``: sort by id,
shuffle with ``random.Random(seed)`` (the package uses seed 42), then ``re.match`` the
filter, then apply the ``A:B`` slice. With ``seed=42`` the order is exactly the package's.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import PackageNotFoundError
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from benchmarks.programbench import CLEANROOM_TAG, FIXTURE_ID, programbench_version
from harness.api import cache_root

if TYPE_CHECKING:
    from benchmarks.programbench.order import InstanceOrder

Difficulty = Literal["easy", "medium", "hard", "none"]
DEFAULT_SHUFFLE_SEED = 42
FIXTURE_PREFIX = "testorg__"
_ID_RE = re.compile(r"^[A-Za-z0-9._-]+$")
LANGUAGE_NAMES = {
    "rs": "Rust",
    "go": "Go",
    "c": "C",
    "cpp": "C++",
    "hs": "Haskell",
    "java": "Java",
    "bash": "Bash",
}


DIFFICULTIES = ("easy", "medium", "hard", "none")
_FIELDS = ("instance_id", "image_name", "repository", "commit", "language", "difficulty",
           "eval_clean_hashes")


@dataclass(frozen=True)
class PBInstance:
    """One ProgramBench task as shipped in the package (``task.yaml`` + derived names).

    A plain frozen dataclass (validated in ``__post_init__``): collection builds 201 of them
    and must not need pydantic.
    """

    instance_id: str
    image_name: str  # without tag, e.g. programbench/abishekvashok_1776_cmatrix.5c082c6
    repository: str
    commit: str
    language: str
    difficulty: Difficulty = "none"
    eval_clean_hashes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.instance_id, str) or not _ID_RE.match(self.instance_id):
            raise ValueError(f"invalid instance id {self.instance_id!r}")
        for name in ("image_name", "repository", "commit", "language"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{self.instance_id}: {name} must be a string")
        if self.difficulty in (None, ""):
            object.__setattr__(self, "difficulty", "none")
        if self.difficulty not in DIFFICULTIES:
            raise ValueError(f"{self.instance_id}: difficulty {self.difficulty!r} is not one "
                             f"of {', '.join(DIFFICULTIES)}")
        object.__setattr__(self, "eval_clean_hashes", tuple(self.eval_clean_hashes))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PBInstance:
        """From :meth:`to_dict`'s form; unknown keys are refused (ValueError)."""
        extra = set(data) - set(_FIELDS)
        if extra:
            raise ValueError(f"unknown instance fields: {', '.join(sorted(extra))}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise ValueError(str(exc)) from exc

    def to_dict(self) -> dict[str, Any]:
        return {name: (list(value) if isinstance(value, tuple) else value)
                for name, value in ((n, getattr(self, n)) for n in _FIELDS)}

    @property
    def n_clean_hashes(self) -> int:
        return len(self.eval_clean_hashes)

    @property
    def language_name(self) -> str:
        """Display name of ``language`` (task.yaml uses codes: rs, go, c, cpp, hs, java)."""
        return LANGUAGE_NAMES.get(self.language, self.language)

    @property
    def is_fixture(self) -> bool:
        return self.instance_id.startswith(FIXTURE_PREFIX)

    def image_ref(self, tag: str = CLEANROOM_TAG) -> str:
        return f"{self.image_name}:{tag}"


def tasks_dir() -> Path:
    from programbench.constants import TASKS_DIR

    return Path(TASKS_DIR)


@lru_cache(maxsize=1)
def _load_cached() -> tuple[PBInstance, ...]:
    key = _cache_key()
    cached = _read_cache(key) if key is not None else None
    if cached is not None:
        return cached
    from programbench.utils.load_data import load_all_instances

    raw = load_all_instances(include_tests=False)
    out = tuple(sorted((
        PBInstance(
            instance_id=item["instance_id"],
            image_name=item["image_name"],
            repository=item["repository"],
            commit=str(item["commit"]),
            language=str(item["language"]),
            difficulty=item.get("difficulty") or "none",
            eval_clean_hashes=tuple(item.get("eval_clean_hashes") or ()),
        )
        for item in raw
    ), key=lambda inst: inst.instance_id))
    if key is not None and Path(tasks_dir()) == _package_tasks_dir():
        _write_cache(key, out)
    return out


# Parsing the 201 task.yaml files costs more than the rest of collection: the parsed
# instances are kept in the user's cache, keyed by the package version and every task
# file's name, size and mtime (like bytecode), so a changed or added task reloads.
_CACHE_FORMAT = 1


def _package_tasks_dir() -> Path | None:
    spec = importlib.util.find_spec("programbench")  # located, not imported
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) / "data" / "tasks" if locations else None


def _cache_key() -> str | None:
    root = _package_tasks_dir()
    if root is None or not root.is_dir():
        return None
    try:
        digest = hashlib.sha256(f"{_CACHE_FORMAT}\0{programbench_version()}\0{root}".encode())
        with os.scandir(root) as entries:
            names = sorted(e.name for e in entries if e.is_dir())
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(root / name / "task.yaml")
                digest.update(f"\0{name}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    except (OSError, PackageNotFoundError):
        return None
    return digest.hexdigest()[:32]


def _cache_path(key: str) -> Path:
    return cache_root() / f"programbench-tasks-{key}.json"


def _read_cache(key: str) -> tuple[PBInstance, ...] | None:
    try:
        data = json.loads(_cache_path(key).read_text(encoding="utf-8"))
        return tuple(PBInstance.from_dict(item) for item in data)
    except (OSError, ValueError):  # missing, unreadable or corrupt: load from the package
        return None


def _write_cache(key: str, instances: tuple[PBInstance, ...]) -> None:
    from harness.api import atomic_write_text

    path = _cache_path(key)
    with contextlib.suppress(OSError):  # a read-only home only costs the speed-up
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps([i.to_dict() for i in instances]))


def load_instances(*, include_fixture: bool = True) -> list[PBInstance]:
    """All instances sorted by id: 200 tasks plus (by default) the offline fixture tasks."""
    items = _load_cached()
    if include_fixture:
        return list(items)
    return [inst for inst in items if not inst.is_fixture]


def fixture_ids() -> list[str]:
    """The offline fixture tasks' ids (``testorg__*``), sorted: ``--pb-fixtures`` runs them."""
    return [inst.instance_id for inst in _load_cached() if inst.is_fixture]


def instances_by_id() -> dict[str, PBInstance]:
    return {inst.instance_id: inst for inst in _load_cached()}


def get_instance(instance_id: str) -> PBInstance:
    try:
        return instances_by_id()[instance_id]
    except KeyError:
        raise KeyError(f"unknown ProgramBench instance id {instance_id!r}") from None


def parse_slice(spec: str) -> slice:
    """``"A:B"`` (either side optional, negatives allowed) -> ``slice``; a bad spec raises."""
    parts = spec.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"invalid slice {spec!r}: expected A:B")
    try:
        values = [int(p) if p.strip() else None for p in parts]
    except ValueError:
        raise ValueError(f"invalid slice {spec!r}: bounds must be integers") from None
    return slice(*values)


def compile_filter(spec: str) -> re.Pattern[str]:
    try:
        return re.compile(spec)
    except re.error as exc:
        raise ValueError(f"invalid --pb-filter regex {spec!r}: {exc}") from None


def select_instances(
    instances: list[PBInstance] | None = None,
    *,
    filter_spec: str | None = None,
    slice_spec: str | None = None,
    shuffle: bool = False,
    seed: int = DEFAULT_SHUFFLE_SEED,
    include_fixture: bool = False,
    fixtures_only: bool = False,
) -> list[PBInstance]:
    """Apply ``--pb-filter`` / ``--pb-shuffle --pb-seed`` / ``--pb-slice``, in the package's order.

    The pool is the 200 real tasks; ``fixtures_only`` makes it the offline fixture tasks
    instead (ids starting ``testorg__``: their images are not published, the offline fixture
    builds them locally; ``--pb-fixtures``), ``include_fixture`` both.
    """
    pool = list(instances) if instances is not None else load_instances()
    if fixtures_only:
        pool = [inst for inst in pool if inst.is_fixture]
    elif not include_fixture:
        pool = [inst for inst in pool if not inst.is_fixture]
    pool.sort(key=lambda inst: inst.instance_id)
    if shuffle:
        random.Random(seed).shuffle(pool)
    if filter_spec:
        pattern = compile_filter(filter_spec)
        pool = [inst for inst in pool if pattern.match(inst.instance_id)]
    if slice_spec:
        pool = pool[parse_slice(slice_spec)]
    return pool


def instance_order(
    selected: list[PBInstance],
    *,
    shuffle: bool,
    seed: int | None,
    filter_spec: str | None = None,
    slice_spec: str | None = None,
    include_fixture: bool = False,
) -> InstanceOrder:
    """The ``instance_order.json`` record of a selection (``shuffle_seed`` null when unshuffled)."""
    from benchmarks.programbench.order import InstanceOrder

    return InstanceOrder(
        count=len(selected),
        shuffle=shuffle,
        shuffle_seed=seed if shuffle else None,
        instance_ids=[inst.instance_id for inst in selected],
        filter=filter_spec or None,
        slice=slice_spec or None,
        include_fixture=include_fixture,
    )


def __getattr__(name: str) -> Any:  # PEP 562: the pydantic record loads on first use
    if name == "InstanceOrder":
        from benchmarks.programbench.order import InstanceOrder

        return InstanceOrder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_SHUFFLE_SEED",
    "FIXTURE_ID",
    "InstanceOrder",
    "PBInstance",
    "fixture_ids",
    "get_instance",
    "instance_order",
    "instances_by_id",
    "load_instances",
    "parse_slice",
    "programbench_version",
    "select_instances",
]
