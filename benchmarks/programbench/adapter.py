"""The ProgramBench adapter: its options, its instances (as pytest items) and its config."""

from __future__ import annotations

import os
import re
from typing import Any

import pytest

from benchmarks.programbench import (
    BENCHMARK,
    CLEANROOM_TAG,
    DEFAULT_TIMEOUT_SEC,
    DISABLED_TOOLS,
    NEAR_RESOLVED_AT,
)
from benchmarks.programbench.cli_env import (
    CliSetupError,
    default_docker_cpus,
    programbench_cli,
)
from benchmarks.programbench.tasks import (
    DEFAULT_SHUFFLE_SEED,
    PBInstance,
    fixture_ids,
    parse_slice,
    programbench_version,
    select_instances,
)
from harness.api import (
    DeclaredBenchmark,
    InstanceSpec,
    Kept,
    Outcome,
    RefusalError,
    RenamedOption,
    Trial,
    Verdict,
    ancestor_manifest,
    refuse_renamed,
)

EVAL_MODES = ("per-task", "batch", "off")
DEFAULT_CPUS = 4.0
DEFAULT_MEMORY = "16g"
# The options' spellings before they carried the benchmark's prefix (issue 42): refused,
# naming the new one.
RENAMED = (
    RenamedOption("--redo-existing", "--pb-redo-existing", flag=True),
    RenamedOption("--eval", "--pb-eval"),
    RenamedOption("--cpus", "--pb-cpus"),
    RenamedOption("--memory", "--pb-memory"),
    RenamedOption("--docker-cpus", "--pb-docker-cpus"),
    RenamedOption("--task-timeout", "--pb-task-timeout"),
)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("programbench", "ProgramBench")
    group.addoption("--pb-filter", default=None, metavar="REGEX",
                    help="select instances whose id matches REGEX (re.match)")
    group.addoption("--pb-slice", default=None, metavar="A:B",
                    help="keep a slice of the selected order (after -k/-m/--pb-filter), "
                         "e.g. -m \"difficulty('easy')\" --pb-slice 0:3")
    group.addoption("--pb-shuffle", action="store_true", default=False,
                    help="shuffle the instance order (seeded, see --pb-seed)")
    group.addoption("--pb-seed", default=str(DEFAULT_SHUFFLE_SEED), metavar="N",
                    help=f"shuffle seed (default {DEFAULT_SHUFFLE_SEED})")
    group.addoption("--pb-redo-existing", dest="redo_existing", action="store_true",
                    default=False,
                    help="on resume, solve again even when a submission exists: the kept "
                         "submission is not re-scored and the ancestors' task checkpoints are "
                         "cleared (no reattach; their tasks are cancelled, their kept sandboxes "
                         "removed)")
    group.addoption("--pb-workspace", choices=("auto", "host", "sandbox"), default="auto",
                    help="where the agent's workspace lives: host (the specification's "
                         "end-to-end mode: seeded under the run root, mounted on /workspace, "
                         "its host path sent to the agent server), sandbox (inside the "
                         "container only), auto (default: host for --agent gateway)")
    group.addoption("--pb-fixture-layout", choices=("debian", "cleanroom"), default="debian",
                    help="agent-phase image of the offline fixture: debian (agent user, git "
                         "repository) or cleanroom (like a published image: no agent user, "
                         "root-owned /workspace); the official eval uses the canonical image")
    group.addoption("--pb-fixtures", action="store_true", default=False,
                    help="run the offline fixture tasks (every id starting with testorg__, "
                         "e.g. testorg__calculator.abc1234) instead of the 200 real tasks; "
                         "-k/-m/--instance/--task-file narrow among them. A resume of such a "
                         "run keeps it without the flag")
    group.addoption("--pb-allow-grader-version", action="store_true", default=False,
                    help="run a paid agent although the installed programbench (before "
                         "1.2.5) can score a rerun test as passed; the run is then not "
                         "reportable, with the reason")
    group.addoption("--pb-eval", dest="pb_eval", default="per-task", metavar="MODE",
                    help="official scoring: per-task (as soon as a submission exists), "
                         "batch (once at session end) or off")
    group.addoption("--pb-cpus", dest="pb_cpus", default=None, metavar="N",
                    help=f"CPUs of each cleanroom sandbox (default {DEFAULT_CPUS:g}, capped "
                         f"at this host's)")
    group.addoption("--pb-memory", dest="pb_memory", default=DEFAULT_MEMORY, metavar="SIZE",
                    help=f"memory of each cleanroom sandbox, swap equal (default "
                         f"{DEFAULT_MEMORY})")
    group.addoption("--pb-docker-cpus", dest="pb_docker_cpus", default=None, metavar="N",
                    help="--docker-cpus passed to programbench eval (default "
                         "$PROGRAMBENCH_DOCKER_CPUS, else 4; capped at this host's)")
    group.addoption("--pb-task-timeout", dest="pb_timeout", default=str(DEFAULT_TIMEOUT_SEC),
                    metavar="SEC", help=f"agent wall clock per task (default "
                                        f"{DEFAULT_TIMEOUT_SEC}, the official 6 h)")
    for option in RENAMED:
        option.register(group)


def _bad(flag: str, value: Any, fix: str) -> RefusalError:
    return RefusalError(f"{flag} {value!r} {fix}", stage="options", reason="bad_option")


FIXTURES_CONFIG_KEY = f"{BENCHMARK}.fixtures"


def ancestor_ran_fixtures(resume_from: str | None) -> bool:
    """True when ``--resume-from`` names a run of the fixture tasks (``--pb-fixtures``); an
    unreadable ancestor is left to the resume's own refusal."""
    manifest = ancestor_manifest(resume_from)
    config = manifest.get("config") if manifest is not None else None
    return isinstance(config, dict) and config.get(FIXTURES_CONFIG_KEY) is True


def install_fixture_tasks_or_refuse() -> None:
    """The extra fixture tasks in the package's task folder (a fresh environment, or
    programbench reinstalled since setup): idempotent, a few small reads when present."""
    from benchmarks.programbench.fixture_tasks import FixtureInstallError, install_fixture_tasks

    try:
        install_fixture_tasks()
    except FixtureInstallError as exc:
        raise RefusalError(f"--pb-fixtures: {exc}", stage="options",
                           reason="fixture_tasks_missing") from None


class ProgramBenchSettings:
    """The adapter's options, validated once (one-line errors naming the option)."""

    def __init__(self, config: pytest.Config) -> None:
        opt = config.getoption
        refuse_renamed(opt, RENAMED)
        self.filter: str | None = opt("pb_filter")
        self.slice: str | None = opt("pb_slice")
        self.shuffle: bool = opt("pb_shuffle")
        # The offline fixture tasks instead of the real ones: --pb-fixtures, or a resume of
        # a run that had it (its recorded config), so the resume needs no flag to repeat.
        self.fixtures: bool = bool(opt("pb_fixtures")) or ancestor_ran_fixtures(
            config.getoption("resume_from", None))
        try:
            self.seed = int(opt("pb_seed"))
        except ValueError:
            raise _bad("--pb-seed", opt("pb_seed"), "is not an integer; pass e.g. 42") from None
        self.eval_mode: str = opt("pb_eval")
        if self.eval_mode not in EVAL_MODES:
            raise _bad("--pb-eval", self.eval_mode, f"is unknown; use {', '.join(EVAL_MODES)}")
        if self.eval_mode == "batch" and opt("image_disk_ceiling_gb", None) is not None:
            # the batch eval needs every task's image at the session's end; the ceiling
            # removes each one when its instance ends
            raise _bad("--pb-eval", self.eval_mode, "needs every task image at the session's "
                       "end: it cannot run under --image-disk-ceiling-gb; use --pb-eval per-task")
        host = float(os.cpu_count() or 1)
        self.cpus = min(self._number("--pb-cpus", opt("pb_cpus"), DEFAULT_CPUS), host)
        self.memory: str = str(opt("pb_memory")).strip().lower()
        if not re.fullmatch(r"[1-9][0-9]*[kmg]?", self.memory):  # Docker's --memory form
            raise _bad("--pb-memory", opt("pb_memory"), "is not a size; pass e.g. 16g or 512m")
        try:
            spec_default = default_docker_cpus()
            programbench_cli()  # $PROGRAMBENCH_PYTHON, checked before any task burns
        except CliSetupError as exc:
            raise RefusalError(str(exc), stage="options", reason="bad_option") from None
        self.docker_cpus = int(min(self._number("--pb-docker-cpus", opt("pb_docker_cpus"),
                                                spec_default), host))
        self.timeout = self._number("--pb-task-timeout", opt("pb_timeout"), DEFAULT_TIMEOUT_SEC)
        self.workspace: str = opt("pb_workspace")

    @staticmethod
    def _number(flag: str, raw: Any, default: float) -> float:
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if value <= 0:
            raise _bad(flag, raw, "is not a positive number")
        return value


class ProgramBenchAdapter(DeclaredBenchmark):
    name = BENCHMARK
    instruction_file = "instruction.txt"
    marker_names = ("difficulty", "language")
    benchmark_size = 200
    near_resolved_at = NEAR_RESOLVED_AT
    # ProgramBench's own status words (``programbench eval`` reports).
    status_vocabulary = {
        Outcome.SCORED: "completed",
        Outcome.AGENT_FAILED: "failed",
        Outcome.INFRA_FAILED: "infra_failed",
        Outcome.BLOCKED: "blocked",
        Outcome.NOT_ATTEMPTED: "blocked",
        Outcome.SKIPPED: "skipped",
        Outcome.CARRIED: "skipped",
        Outcome.DRY_RUN: "skipped",
    }

    # The specification's settings_base.json decisions (checked with --settings-path).
    server_profile = {
        "OUROBOROS_TASK_REVIEW_MODE": "required",
        "OUROBOROS_RUNTIME_MODE": "pro",
        "OUROBOROS_MAX_WORKERS": "4",
        "OUROBOROS_SAFETY_MODE": "light",
    }
    solve_task_disabled_tools = DISABLED_TOOLS

    def settings(self, config: pytest.Config) -> ProgramBenchSettings:
        cached: ProgramBenchSettings | None = getattr(self, "_settings", None)
        if cached is None:
            cached = ProgramBenchSettings(config)
            if cached.fixtures:  # the denominator of a fixture run is the fixture tasks
                install_fixture_tasks_or_refuse()  # before anything lists the tasks
                self.benchmark_size = len(fixture_ids())
            self._settings = cached
        return cached

    def image_ref(self, instance_id: str) -> str | None:
        """The canonical image of an instance (what ``programbench eval`` looks up)."""
        from benchmarks.programbench.tasks import instances_by_id

        inst = instances_by_id().get(instance_id)
        return inst.image_ref() if inst is not None else None

    def selected(self, config: pytest.Config) -> list[PBInstance]:
        """The candidates in order, before -k/-m and ``--pb-slice`` (see :meth:`slice_of`)."""
        s = self.settings(config)
        try:
            if s.slice:
                parse_slice(s.slice)
            return select_instances(filter_spec=s.filter, shuffle=s.shuffle, seed=s.seed,
                                    fixtures_only=s.fixtures)
        except ValueError as exc:
            raise RefusalError(f"--pb-filter/--pb-slice: {exc}", stage="options",
                               reason="bad_option") from exc

    def slice_of(self, config: pytest.Config, items: list[pytest.Item]) -> list[pytest.Item]:
        """``--pb-slice`` over the selected order: after -k, -m and ``--pb-filter``, so
        ``-m "difficulty('easy')" --pb-slice 0:3`` is the first three easy tasks."""
        s = self.settings(config)
        if not s.slice:
            return items
        # The selected order (--pb-filter/--pb-shuffle), not the execution order that
        # --order longest-first may already have given the items.
        rank = {inst.instance_id: n for n, inst in enumerate(self.selected(config))}
        from harness.api import item_spec

        def task(item: pytest.Item) -> str:
            found = item_spec(item)
            return found[1].instance_id if found else ""  # the task, for each of its attempts

        # the slice selects tasks (issue 41): every attempt of a task it keeps is kept
        tasks = sorted(dict.fromkeys(task(i) for i in items),
                       key=lambda t: rank.get(t, len(rank)))
        kept = set(tasks[parse_slice(s.slice)])
        return [i for i in sorted(items, key=lambda i: rank.get(task(i), len(rank)))
                if task(i) in kept]

    def instances(self, config: pytest.Config) -> list[InstanceSpec]:
        specs = []
        for inst in self.selected(config):
            keywords = [inst.language_name.lower(), inst.repository.split("/")[-1]]
            if inst.is_fixture:
                keywords.append("fixture")
            specs.append(InstanceSpec(
                instance_id=inst.instance_id,
                markers={"difficulty": inst.difficulty, "language": inst.language_name.lower()},
                keywords=keywords, data=inst))
        return specs

    def version(self) -> str:
        return f"programbench=={programbench_version()}"

    def result_config(self, config: pytest.Config) -> dict[str, Any]:
        """Not ``--pb-eval``: per task, batch or off, a score is the same official CLI's
        verdict on the same submission, so a resume of a ``--pb-eval off`` run may score it."""
        s = self.settings(config)
        out: dict[str, Any] = {"cpus": s.cpus, "memory": s.memory,
                               "task_timeout_sec": s.timeout, "image_tag": CLEANROOM_TAG}
        if s.fixtures:  # only then: a real run's fingerprint is what it always was
            out["fixtures"] = True
        return out

    def selectors_given(self, config: pytest.Config) -> bool:
        """``--pb-filter``/``--pb-slice``; ``--pb-fixtures`` picks the pool, not a subset."""
        s = self.settings(config)
        return bool(s.filter or s.slice)

    # the trial's steps (harness.runner.trial), in benchmarks.programbench.runner (loaded
    # when an instance runs, not at collection) --------------------------------------------
    def instruction(self, trial: Trial) -> str:
        return str(_steps().instruction(trial))

    def agent_timeout(self, trial: Trial) -> float:
        return float(self.settings(trial.config).timeout)

    def dry_run(self, trial: Trial, instruction: str) -> None:
        _steps().dry_run(trial, instruction)

    def has_oracle(self, trial: Trial) -> bool:
        """Only the offline fixture ships a reference solution (known before any pull: a run
        with the oracle never pulls a real task's multi-GB image to record skipped)."""
        return bool(trial.data.is_fixture)

    def oracle(self, trial: Trial, sandbox: Any) -> Any:
        return _steps().oracle_for(trial.data, sandbox)

    def prepare(self, trial: Trial) -> str:
        return str(_steps().prepare(trial))

    def kept_artifact(self, trial: Trial) -> Kept | None:
        kept: Kept | None = _steps().kept_artifact(trial)
        return kept

    def redo_existing(self, trial: Trial) -> bool:
        return bool(trial.option("redo_existing"))

    def provision(self, trial: Trial, image: str, labels: Any) -> Any:
        return _steps().provision(trial, image, labels)

    def agent_terms(self, trial: Trial) -> Any:
        return _steps().agent_terms(trial)

    def collect(self, trial: Trial, sandbox: Any) -> Any:
        return _steps().collect(trial, sandbox)

    def score(self, trial: Trial, sandbox: Any, artifact: Any) -> Verdict:
        verdict: Verdict = _steps().score(trial, sandbox, artifact)
        return verdict

    def eval_interrupted(self, trial: Trial) -> None:
        _steps().set_aside_interrupted_eval(trial.ctx)


def _steps() -> Any:
    """ProgramBench's steps (:mod:`benchmarks.programbench.runner`: the sandbox, the agent's
    request, the official eval), imported when the first instance runs."""
    import benchmarks.programbench.runner as steps

    return steps
