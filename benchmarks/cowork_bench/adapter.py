"""Cowork Bench as a runner benchmark: its adapter and its admission record.

Options (:mod:`.options`; ``pytest benchmarks/cowork_bench --help``): ``--cowork-root`` (required), the
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
the new one (:data:`.options.RENAMED`)."""

from __future__ import annotations

from functools import cached_property
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from benchmarks.cowork_bench import BENCHMARK, PINNED_COMMIT
from benchmarks.cowork_bench.options import (
    ADAPTER_VERSION,
    RUN_SCHEMA,
    CoworkOptions,
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
    BenchProvenance,
    CoworkTask,
    bench_provenance,
    bench_version,
    check_provenance,
    discover_tasks,
)
from harness.api import InstanceSpec, Manifest, Outcome, RefusalError, RunContext, write_manifest

STATUS = {
    Outcome.AGENT_FAILED: "agent_failed",
    Outcome.INFRA_FAILED: "infra_failed",
    Outcome.BLOCKED: "not_attempted",
    Outcome.NOT_ATTEMPTED: "not_attempted",
    Outcome.SKIPPED: "not_attempted",
    Outcome.CARRIED: "skipped",  # the ancestor's status stays in details.run.carried_status
    Outcome.DRY_RUN: "skipped",
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
