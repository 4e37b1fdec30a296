"""Cowork Bench as a runner benchmark: its options, its adapter and its admission record.

Options (``pytest benchmarks/cowork_bench --help``): ``--cowork-root`` (required), the
expected commit, the provenance waivers, the residual diagnostic, the task timeout, the
step cap and the per-container limits (``--cowork-cpus`` 1, ``--cowork-memory`` 2g,
``--cowork-pids`` 1024, applied to the agent, eval and database containers alike) and
``--cowork-allow-missing-tools`` (a task whose MCP servers cannot all start still runs),
``--cowork-image``/``--cowork-pg-image`` (other images, resolved at admission:
:mod:`.run_images`). Instances are the checkout's ``tasks/finalpool/*`` with two attribute markers,
``server`` (every MCP server of the task) and ``prefix`` (the legacy name prefix)::

    pytest benchmarks/cowork_bench --cowork-root ~/cowork_bench -m "server('emails')"

Admission (controller, once, after the manifest is written) records the benchmark's
provenance and the applied configuration in ``run_manifest.json`` under ``extra.cowork``,
writes the manifest, and only then enforces the gate (clean tree, pinned commit), so a
refusal is on disk. A waiver given (``--cowork-allow-dirty-bench``,
``--cowork-allow-bench-commit-mismatch``, ``--cowork-allow-missing-tools``) leaves the run
not reportable, naming it (``extra.not_reportable_by_benchmark``). A run that will run (not
a dry run) records the IDs of the images it admits, the harness's default images included
(``extra.cowork.run_images``); a resume is refused when an ancestor ran other images or
another harness commit (:mod:`.resume_check`). The options' spellings before the
``--cowork-`` prefix (``--allow-dirty-bench``, ``--build-image``, ...) are refused, naming
the new one (:data:`RENAMED`)."""

from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from benchmarks.cowork_bench import BENCHMARK, PINNED_COMMIT
from benchmarks.cowork_bench.containers import (
    DEFAULT_CPUS,
    DEFAULT_MEMORY,
    DEFAULT_PIDS,
    Limits,
)
from benchmarks.cowork_bench.resume_check import (
    IMAGE_WAIVER,
    Difference,
    check_ancestors,
    waiver_reasons,
)
from benchmarks.cowork_bench.run_images import (
    ChosenImage,
    RunImages,
    admitted_run_images,
    resolve_images,
)
from benchmarks.cowork_bench.steps import CoworkSteps
from benchmarks.cowork_bench.tasks import (
    FINALPOOL,
    BenchProvenance,
    CoworkTask,
    bench_provenance,
    bench_version,
    check_provenance,
    discover_tasks,
)
from harness.core.adapter import InstanceSpec
from harness.core.errors import RefusalError, RenamedOption, refuse_renamed
from harness.core.models import Manifest, Outcome
from harness.run.manifest import write_manifest
from harness.runner.instance import RunContext

DEFAULT_TASK_TIMEOUT_SEC = 1800.0  # upstream TASK_TIMEOUT (run_parallel.sh)
DEFAULT_MAX_STEPS = 100  # upstream script default
ADAPTER_VERSION = "cowork-adapter-1"  # bump when the adapter changes what a verdict means
RUN_SCHEMA = "harness.cowork.run.v1"
# The options' spellings before they carried the benchmark's prefix (issue 42): refused,
# naming the new one.
RENAMED = tuple(
    RenamedOption(old, "--cowork-" + old[2:], flag=True)
    for old in (
        "--allow-dirty-bench",
        "--allow-bench-commit-mismatch",
        "--diagnostic-eval-on-truncation",
        "--allow-missing-tools",
        "--allow-missing-db",
        "--build-image",
    )
)

STATUS = {
    Outcome.AGENT_FAILED: "agent_failed",
    Outcome.INFRA_FAILED: "infra_failed",
    Outcome.BLOCKED: "not_attempted",
    Outcome.NOT_ATTEMPTED: "not_attempted",
    Outcome.SKIPPED: "not_attempted",
    Outcome.CARRIED: "skipped",  # the ancestor's status stays in details.run.carried_status
    Outcome.DRY_RUN: "skipped",
}


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("cowork_bench", "Cowork Bench")
    _add_checkout_options(group)
    _add_policy_options(group)
    _add_agent_options(group)
    _add_container_options(group)
    for option in RENAMED:
        option.register(group)


def _add_checkout_options(group: pytest.OptionGroup) -> None:
    """Which Cowork Bench checkout runs, and what it may differ in."""
    group.addoption(
        "--cowork-root",
        default=None,
        metavar="PATH",
        help="a Cowork Bench checkout (holds tasks/finalpool and db/init.sql.gz); required",
    )
    group.addoption(
        "--cowork-commit",
        default=PINNED_COMMIT,
        metavar="SHA",
        help=f"the commit the checkout must be at (default the pin {PINNED_COMMIT[:12]})",
    )
    group.addoption(
        "--cowork-allow-dirty-bench",
        dest="allow_dirty_bench",
        action="store_true",
        default=False,
        help="run a checkout with uncommitted changes (recorded in the manifest)",
    )
    group.addoption(
        "--cowork-allow-bench-commit-mismatch",
        dest="allow_bench_commit_mismatch",
        action="store_true",
        default=False,
        help="run a checkout at another commit than --cowork-commit (recorded)",
    )


def _add_policy_options(group: pytest.OptionGroup) -> None:
    """What a run does when a task's tools or database are missing, or its agent truncated."""
    group.addoption(
        "--cowork-diagnostic-eval-on-truncation",
        dest="diagnostic_eval_on_truncation",
        action="store_true",
        default=False,
        help="after a truncated agent run, run the checker once more for the "
        "audit only (never changes the verdict)",
    )
    group.addoption(
        "--cowork-allow-missing-tools",
        dest="allow_missing_tools",
        action="store_true",
        default=False,
        help="run a task even when one of its MCP servers cannot start (recorded); by "
        "default such a task is infra_failed mcp_unavailable and its agent never runs",
    )
    group.addoption(
        "--cowork-allow-missing-db",
        dest="allow_missing_db",
        action="store_true",
        default=False,
        help="run a checkout without db/init.sql.gz (e.g. sparse): the database starts "
        "empty, so a task that needs it fails its preprocess or checker (recorded, the run "
        "is not reportable); by default such a run is infra_failed pg_fail",
    )


def _add_agent_options(group: pytest.OptionGroup) -> None:
    """The agent's wall clock and step cap per task."""
    group.addoption(
        "--cowork-task-timeout",
        default=str(DEFAULT_TASK_TIMEOUT_SEC),
        metavar="SEC",
        help="agent wall clock per task (default 1800, upstream)",
    )
    group.addoption(
        "--cowork-max-steps",
        default=str(DEFAULT_MAX_STEPS),
        metavar="N",
        help="agent step cap handed to the agent (default 100, upstream)",
    )


def _add_container_options(group: pytest.OptionGroup) -> None:
    """The images and resource limits of the agent, eval and database containers."""
    group.addoption(
        "--cowork-image",
        default=None,
        metavar="REF",
        help="run the agent and eval containers in REF (e.g. cowork-pack:<commit> from "
        "`harness cowork build-image`) instead of the harness's Debian runtime image",
    )
    group.addoption(
        "--cowork-pg-image",
        default=None,
        metavar="REF",
        help="the PostgreSQL sidecar's image (pulled if missing, per --pull): the official "
        "postgres:15 contract (docker-entrypoint.sh, PGDATA) or the harness's pg15 layout "
        "(default: the harness's Debian postgresql-15 image)",
    )
    group.addoption(
        "--cowork-cpus",
        default=str(DEFAULT_CPUS),
        metavar="N",
        help=f"CPUs of each Cowork container: agent, eval, database (default {DEFAULT_CPUS:g})",
    )
    group.addoption(
        "--cowork-memory",
        default=DEFAULT_MEMORY,
        metavar="SIZE",
        help=f"memory of each Cowork container, no swap (default {DEFAULT_MEMORY})",
    )
    group.addoption(
        "--cowork-pids",
        default=str(DEFAULT_PIDS),
        metavar="N",
        help=f"process limit of each Cowork container (default {DEFAULT_PIDS})",
    )


def _bad(flag: str, value: Any, fix: str) -> RefusalError:
    return RefusalError(f"{flag} {value!r} {fix}", stage="options", reason="bad_option")


def _ref(value: Any) -> str | None:
    return str(value).strip() or None if value else None


class CoworkOptions(BaseModel):
    """The validated options of one session."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    root: Path
    commit: str
    allow_dirty: bool
    allow_commit_mismatch: bool
    diagnostic: bool
    allow_missing_tools: bool = False
    allow_missing_db: bool = False
    task_timeout_sec: float = Field(gt=0)
    max_steps: int = Field(gt=0)
    cpus: float = Field(default=DEFAULT_CPUS, gt=0)
    memory: str = DEFAULT_MEMORY
    pids: int = Field(default=DEFAULT_PIDS, gt=0)
    image: str | None = None  # --cowork-image
    pg_image: str | None = None  # --cowork-pg-image

    @property
    def limits(self) -> Limits:
        return Limits(cpus=self.cpus, memory=self.memory, pids=self.pids)

    @classmethod
    def from_config(cls, config: pytest.Config) -> CoworkOptions:
        """Every problem is one line naming the option (a :class:`RefusalError`)."""
        opt = config.getoption
        refuse_renamed(opt, RENAMED)
        raw_root = opt("cowork_root")
        if not raw_root:
            raise RefusalError(
                "--cowork-root PATH is required: point it at a Cowork Bench checkout "
                "(e.g. a clone of 0717376/cowork_bench, or tests/fixtures/cowork_mini)",
                stage="options",
                reason="cowork_root_missing",
            )
        root = Path(raw_root).expanduser().resolve()
        if not (root / FINALPOOL).is_dir():
            raise RefusalError(
                f"--cowork-root {raw_root}: no {FINALPOOL}/ there; point it at a Cowork Bench "
                f"checkout",
                stage="options",
                reason="bench_root_invalid",
            )
        try:
            timeout = float(opt("cowork_task_timeout"))
        except ValueError:
            timeout = -1.0
        if timeout <= 0:
            raise _bad(
                "--cowork-task-timeout",
                opt("cowork_task_timeout"),
                "is not a positive number of seconds; pass e.g. 1800",
            )
        try:
            steps = int(opt("cowork_max_steps"))
        except ValueError:
            steps = -1
        if steps <= 0:
            raise _bad(
                "--cowork-max-steps",
                opt("cowork_max_steps"),
                "is not a positive integer; pass e.g. 100",
            )
        try:
            cpus = float(opt("cowork_cpus"))
        except ValueError:
            cpus = -1.0
        if not cpus > 0:
            raise _bad("--cowork-cpus", opt("cowork_cpus"), "is not a positive number; pass e.g. 1")
        memory = str(opt("cowork_memory")).strip().lower()
        if not re.fullmatch(r"[1-9][0-9]*[kmg]?", memory):
            raise _bad("--cowork-memory", opt("cowork_memory"), "is not a size; pass e.g. 2g")
        try:
            pids = int(opt("cowork_pids"))
        except ValueError:
            pids = -1
        if pids <= 0:
            raise _bad("--cowork-pids", opt("cowork_pids"), "is not a positive integer; pass 1024")
        return cls(
            root=root,
            commit=str(opt("cowork_commit")),
            allow_dirty=bool(opt("allow_dirty_bench")),
            allow_commit_mismatch=bool(opt("allow_bench_commit_mismatch")),
            diagnostic=bool(opt("diagnostic_eval_on_truncation")),
            allow_missing_tools=bool(opt("allow_missing_tools")),
            allow_missing_db=bool(opt("allow_missing_db")),
            task_timeout_sec=timeout,
            max_steps=steps,
            cpus=cpus,
            memory=memory,
            pids=pids,
            image=_ref(opt("cowork_image")),
            pg_image=_ref(opt("cowork_pg_image")),
        )

    def applied_config(self) -> dict[str, Any]:
        """The options that change results (they enter the run's config fingerprint)."""
        return {
            "task_timeout_sec": self.task_timeout_sec,
            "max_steps": self.max_steps,
            "diagnostic_eval_on_truncation": self.diagnostic,
            "allow_missing_tools": self.allow_missing_tools,
            **({"allow_missing_db": True} if self.allow_missing_db else {}),
            "expected_commit": self.commit,
            "container_limits": {"cpus": self.cpus, "memory": self.memory, "pids": self.pids},
            **({"cowork_image": self.image} if self.image else {}),
            **({"cowork_pg_image": self.pg_image} if self.pg_image else {}),
        }


class BenchGate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ok: bool
    reason: str | None = None
    message: str | None = None
    allow_dirty_bench: bool
    allow_bench_commit_mismatch: bool


class CoworkRunRecord(BaseModel):
    """``run_manifest.json`` ``extra.cowork``: what was run, from where, with what."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: str = Field(default=RUN_SCHEMA, alias="schema")
    adapter_version: str = ADAPTER_VERSION
    pinned_commit: str = PINNED_COMMIT
    bench: BenchProvenance
    bench_version: str
    bench_gate: BenchGate
    applied_config: dict[str, Any]
    task_count: int
    images: dict[str, ChosenImage] = Field(default_factory=dict)  # given images, resolved
    # role (runtime, pg) -> the image ID this run admits, defaults included (not a dry run)
    run_images: dict[str, str] = Field(default_factory=dict)
    run_images_error: str | None = None
    resume_waived: list[str] = Field(default_factory=list)  # --allow-image-change, used


class CoworkAdapter(CoworkSteps):
    name = BENCHMARK
    benchmark_size = 496  # the pinned dataset (issue 14: a subset says "N of 496")
    marker_names = ("server", "prefix")
    needs_agent = True
    writes_monitor = True  # the specification's monitor.json: progress, even without a budget
    tool_routes = True  # its MCP servers reach an agent server through a relay (mcp_access)

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @cached_property
    def options(self) -> CoworkOptions:
        return CoworkOptions.from_config(self.config)

    @cached_property
    def provenance(self) -> BenchProvenance:
        return bench_provenance(self.options.root, expected=self.options.commit)

    @cached_property
    def tasks(self) -> list[CoworkTask]:
        """The checkout's tasks, discovered once per session (instances and admission)."""
        return discover_tasks(self.options.root)

    def instances(self, config: pytest.Config) -> list[InstanceSpec]:
        return [
            InstanceSpec(
                instance_id=t.instance_id,
                markers={"server": list(t.servers), "prefix": t.prefix},
                keywords=t.keywords(),
                data=t,
            )
            for t in self.tasks
        ]

    def version(self) -> str:
        return f"{bench_version(self.provenance)} {ADAPTER_VERSION}"

    @cached_property
    def images(self) -> RunImages:
        """``--cowork-image``/``--cowork-pg-image`` resolved to IDs, once per process."""
        return resolve_images(self.config, {"runtime": self.options.image,
                                            "pg": self.options.pg_image})  # fmt: skip

    def result_config(self, config: pytest.Config) -> dict[str, Any]:
        """The applied options, plus the IDs of given images (a resume must run the same)."""
        out = self.options.applied_config()
        for role, chosen in self.images.chosen.items():
            out[f"cowork_{'image' if role == 'runtime' else 'pg_image'}_id"] = chosen.id
        return out

    def status_for(self, outcome: Outcome, resolved: bool | None) -> str:
        if outcome is Outcome.SCORED:
            return "passed" if resolved else "failed"
        return STATUS[outcome]

    def admit(self, run: RunContext) -> None:
        """Record provenance and config in the manifest, write it, then enforce the gate."""
        opts, prov = self.options, self.provenance
        gate = BenchGate(
            ok=True,
            allow_dirty_bench=opts.allow_dirty,
            allow_bench_commit_mismatch=opts.allow_commit_mismatch,
        )
        refusal: RefusalError | None = None
        try:
            check_provenance(
                prov, allow_dirty=opts.allow_dirty, allow_other_commit=opts.allow_commit_mismatch
            )
        except RefusalError as exc:
            refusal = exc
            gate = gate.model_copy(update={"ok": False, "reason": exc.reason, "message": str(exc)})
        record = CoworkRunRecord(
            bench=prov,
            bench_version=bench_version(prov),
            bench_gate=gate,
            applied_config=opts.applied_config(),
            task_count=len(self.tasks),
            images={str(k): v for k, v in self.images.chosen.items()},
        )
        reasons = waiver_reasons(
            opts.allow_dirty, opts.allow_commit_mismatch, opts.allow_missing_tools,
            dirty=prov.dirty,
            commit_matches=None if not (prov.kind == "checkout" and prov.expected)
            else prov.head == prov.expected, allow_missing_db=opts.allow_missing_db)
        self._record(run, record, reasons)
        if refusal is not None:
            raise refusal
        if self.images.error is not None:
            raise self.images.error
        if run.plan.dry_run:
            return
        resuming = bool(run.plan.ancestors)
        try:
            record.run_images = self.run_image_ids()
        except Exception as exc:  # no Docker, a failed build: the instances say so themselves
            record.run_images_error = f"{type(exc).__name__}: {exc}"[:500]
            self._record(run, record, reasons)
            if resuming:
                raise RefusalError(
                    f"--resume-from {run.plan.ancestors[0]}: cannot tell which Cowork images "
                    f"this run would use ({record.run_images_error}); fix the engine, then "
                    "resume again", stage="resume", reason="cowork_images_unknown") from exc
            return
        self._record(run, record, reasons)
        if resuming and run.manifest is not None:
            waived = self.check_resume(run.manifest, run.plan.ancestors, record.run_images)
            if waived:
                record.resume_waived = [d.text() for d in waived]
                reasons = [*reasons, *(f"cowork resume waived {d.field} change "
                                       f"({IMAGE_WAIVER}): {d.text()}" for d in waived)]
                self._record(run, record, reasons)

    def _record(self, run: RunContext, record: CoworkRunRecord, reasons: list[str]) -> None:
        if run.manifest is None:
            return
        extra = run.manifest.extra
        extra.set_section("cowork", record)
        extra.not_reportable_by_benchmark = {**(extra.not_reportable_by_benchmark or {}),
                                             self.name: list(reasons)}
        write_manifest(run.manifest)

    def run_image_ids(self) -> dict[str, str]:
        """role -> image ID: the given images, else the harness's own (built if missing)."""
        return admitted_run_images(self.images)

    def check_resume(self, current: Manifest, ancestors: list[str],
                     now: dict[str, str]) -> list[Difference]:
        return check_ancestors(self.name, current, ancestors, now,
                               allow_image_change=bool(
                                   self.config.getoption("allow_image_change", False)))
