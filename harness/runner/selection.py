"""Which instances a run selects: the user's selectors as the manifest records them,
``--task-file``, unknown ids refused before anything is recorded, and a resume kept to its
ancestor's benchmarks. A pytest plugin of the runner (``harness.runner.plugin`` loads it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.core.adapter import BenchmarkAdapter
from harness.core.fsutil import read_json
from harness.core.outcomes import attempt_id
from harness.run.plan import PlanError, parse_count, read_task_file, unknown_ids
from harness.runner.worker import item_spec

# The ids the user gave with --instance (before --task-file's ids joined them).
GIVEN_INSTANCES_KEY: pytest.StashKey[list[str]] = pytest.StashKey()
# The benchmarks of this run when --resume-from narrows them to its ancestor's.
RUN_BENCHMARKS_KEY: pytest.StashKey[frozenset[str]] = pytest.StashKey()
# K, the attempts per task (--attempts, or the ancestor's on resume), and the -k the user
# gave (before its attempt ids were rewritten: harness.run.plan.rewrite_attempt_keywords).
ATTEMPTS_KEY: pytest.StashKey[int] = pytest.StashKey()
GIVEN_KEYWORD_KEY: pytest.StashKey[str] = pytest.StashKey()


def user_selectors(config: pytest.Config, adapters: list[BenchmarkAdapter]) -> dict[str, Any]:
    """What the user narrowed the selection with (-k, -m, --instance, node ids, a
    benchmark's own options); empty when they selected nothing in particular."""
    opt = config.option
    selectors: dict[str, Any] = {}
    keyword = config.stash.get(GIVEN_KEYWORD_KEY, opt.keyword)
    if keyword:
        selectors["keyword"] = keyword
    if opt.markexpr:
        selectors["markexpr"] = opt.markexpr
    given = config.stash.get(GIVEN_INSTANCES_KEY, None)
    instances = list(opt.instance) if given is None else given
    if instances:
        selectors["instance"] = instances
    if getattr(opt, "task_file", None):
        selectors["task_file"] = str(Path(opt.task_file).resolve())
    if getattr(opt, "all_instances", False):
        selectors["all_instances"] = True
    node_args = [a for a in config.args if "::" in a]
    if node_args:
        selectors["nodeids"] = node_args
    for adapter in adapters:
        if adapter.selectors_given(config):
            selectors[f"{adapter.name}_options"] = True
    return selectors


# workerinput["harness"][...]: the ids the controller resolved (--instance and --task-file),
# and K (--attempts, or the ancestor's).
WORKER_INSTANCES = "instance_ids"
WORKER_ATTEMPTS = "attempts"


def resolve_attempts(config: pytest.Config) -> int:
    """K, the attempts per task: ``--attempts``, else (``--resume-from``) the ancestor's,
    else 1; an xdist worker takes the controller's (stashed once per process)."""
    if ATTEMPTS_KEY in config.stash:
        return config.stash[ATTEMPTS_KEY]
    info = getattr(config, "workerinput", {}).get("harness") or {}
    raw = getattr(config.option, "attempts", None)
    if WORKER_ATTEMPTS in info:
        k = int(info[WORKER_ATTEMPTS])
    elif raw is not None:
        k = parse_count("--attempts", raw, minimum=1, example="--attempts 3")
    else:
        manifest = ancestor_manifest(config.option.resume_from)
        extra = manifest.get("extra") if manifest is not None else None
        value = extra.get("attempts") if isinstance(extra, dict) else None
        k = value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1
    config.stash[ATTEMPTS_KEY] = k
    return k


def apply_task_file(config: pytest.Config) -> None:
    """``--task-file``'s ids join ``--instance``'s; the user's own ``--instance`` ids are kept
    apart for the manifest's selectors. The controller reads the file once: an xdist worker
    (a replacement one too) takes the ids it resolved (:func:`worker_instances`), never the
    file, which may have changed since (the frozen plan)."""
    if GIVEN_INSTANCES_KEY in config.stash:
        return
    given = list(config.option.instance or [])
    config.stash[GIVEN_INSTANCES_KEY] = given
    info = getattr(config, "workerinput", {}).get("harness") or {}
    if WORKER_INSTANCES in info:
        config.option.instance = list(info[WORKER_INSTANCES])
        return
    path = getattr(config.option, "task_file", None)
    if path:
        config.option.instance = list(dict.fromkeys([*given, *read_task_file(path)]))


def worker_instances(config: pytest.Config) -> dict[str, Any]:
    """What a worker's ``workerinput["harness"]`` carries of the selection by name, and K."""
    return {WORKER_INSTANCES: requested_ids(config), WORKER_ATTEMPTS: resolve_attempts(config)}


def requested_ids(config: pytest.Config) -> list[str]:
    """Every instance id the user asked for by name (``--instance`` and ``--task-file``)."""
    return list(config.option.instance or [])


def check_requested_ids(config: pytest.Config, adapters: dict[str, BenchmarkAdapter]) -> None:
    """An id that none of the run's benchmarks has is refused before anything is recorded
    (PlanError naming the ids and where they came from)."""
    wanted = requested_ids(config)
    if not wanted:
        return
    tasks: set[str] = set()
    for adapter in adapters.values():
        tasks.update(spec.instance_id for spec in adapter.instances(config))
    known = set(tasks)  # a task's id selects its K attempts, an attempt's id only it
    samples = resolve_attempts(config)
    if samples > 1:
        known.update(attempt_id(t, k) for t in tasks for k in range(1, samples + 1))
    unknown = unknown_ids(wanted, known)
    if not unknown:
        return
    task_file = getattr(config.option, "task_file", None)
    given_ids: list[str] | None = config.stash.get(GIVEN_INSTANCES_KEY, None)
    given = set(given_ids or ())
    sources = []
    from_flag = [i for i in unknown if i in given]
    from_file = [i for i in unknown if i not in given]
    if from_flag:
        sources.append(f"--instance {', '.join(from_flag)}")
    if from_file:
        sources.append(f"--task-file {task_file}: {', '.join(from_file)}")
    names = ", ".join(sorted(adapters))
    raise PlanError(f"{'; '.join(sources)}: no such instance id in {names} "
                    f"({len(tasks)} instances here); list them with --collect-only -q")


def ancestor_manifest(resume_from: str | None) -> dict[str, Any] | None:
    """The manifest of the run ``--resume-from`` names, as read at start-up (before the
    resume is planned): None without a resume, or when it is missing or unreadable (left to
    the resume's own refusal)."""
    if not resume_from:
        return None
    try:
        data = read_json(Path(resume_from) / "run_manifest.json")
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def resume_benchmarks(config: pytest.Config,
                      adapters: dict[str, BenchmarkAdapter]) -> dict[str, BenchmarkAdapter]:
    """With ``--resume-from``: the ancestor's benchmarks only, so ``pytest --resume-from RUN``
    from the repository root resumes RUN's benchmark whatever else is collectable. A missing
    or unreadable ancestor is left to the resume's own refusal."""
    root = config.option.resume_from
    manifest = ancestor_manifest(root)
    if manifest is None:
        return adapters
    names = manifest.get("benchmarks")
    if not isinstance(names, list) or not names:
        return adapters
    missing = sorted(set(names) - set(adapters))
    if missing:
        raise PlanError(
            f"--resume-from {root} ran {', '.join(missing)}, which this session cannot "
            f"list; give the options it needs (see the line above, e.g. its checkout) or "
            f"run pytest on its folder")
    config.stash[RUN_BENCHMARKS_KEY] = frozenset(names)
    return {name: a for name, a in adapters.items() if name in names}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A resume's items are its ancestor's benchmarks' (see :func:`resume_benchmarks`)."""
    names = config.stash.get(RUN_BENCHMARKS_KEY, None)
    if names is None:
        return

    drop = [i for i in items if (found := item_spec(i)) is not None and found[0] not in names]
    if drop:
        config.hook.pytest_deselected(items=drop)
        gone = set(drop)
        items[:] = [i for i in items if i not in gone]


def names_folder(config: pytest.Config, folder: Path) -> bool:
    """The command line names ``folder`` or something in it (a benchmark that collects only
    when asked for, or given its input)."""
    base = config.invocation_params.dir
    for arg in config.args:
        path = (base / str(arg).split("::", 1)[0]).resolve()
        if path == folder or folder in path.parents:
            return True
    return False
