"""The files ``harness programbench submission`` writes, as models: its record
(``harness_submission.json``), the ``_stats`` maps, the seed ``submission.yaml`` and the
official commands' verdicts."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

SCHEMA = "harness.programbench.submission.v1"
RECORD_NAME = "harness_submission.json"
STATS = ("cost", "calls", "tokens")


class ToolVerdict(BaseModel):
    """One official command's verdict (``ok``: it exited 0)."""

    model_config = ConfigDict(extra="forbid")

    step: Literal["package", "verify"]
    cmd: list[str]
    returncode: int | None
    ok: bool
    duration_s: float
    timed_out: bool = False
    stdout_tail: str = ""
    stderr_tail: str = ""

    def summary(self) -> str:
        """The command's last meaningful output line."""
        lines = [
            ln.strip()
            for ln in (self.stdout_tail + "\n" + self.stderr_tail).splitlines()
            if ln.strip()
        ]
        if self.step == "verify":
            picked = [ln for ln in lines if ln.startswith(("Tier-0", "PASS", "FAIL"))]
            lines = picked or lines
        elif self.ok:
            lines = [ln for ln in lines if ln.startswith("Packaged")] or lines
        return " / ".join(lines[-2:])[-400:]


class SubmissionRefused(Exception):
    """One line: what is wrong and the fix."""


class CopiedFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    sha256: str
    size_bytes: int
    source: str


class PackedInstance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instance_id: str  # the task id (the folder name in DIR)
    row_instance_id: str  # the row's id ("<iid>@<k>" for an attempt)
    attempt: int | None = None
    source_run: str  # the run root the files were copied from
    carried_from: str | None = None
    score: float | None = None
    submission_sha256_verified: bool = False
    files: list[CopiedFile] = Field(default_factory=list)
    cut: list[str] = Field(default_factory=list)  # files not copied for their size, and why


class LeftOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instance_id: str
    reason: str


class StatGap(BaseModel):
    """A stat left out of ``_stats/<stat>.json`` because the row does not know it."""

    model_config = ConfigDict(extra="forbid")

    instance_id: str
    stat: Literal["cost", "calls", "tokens"]
    reason: str


class SubmissionRecord(BaseModel):
    """``DIR/harness_submission.json``: what was written, from which run, and both verdicts."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: str = Field(default=SCHEMA, alias="schema")
    status: Literal["writing", "written"] = "writing"
    created_at_unix: float
    source_run: str
    run_id: str
    output: str
    reportable: bool
    not_reportable: list[str] = Field(default_factory=list)
    forced: bool = False
    attempt: int | None = None
    attempts_per_task: int = 1
    subset_notice: str | None = None
    instances: list[PackedInstance] = Field(default_factory=list)
    left_out: list[LeftOut] = Field(default_factory=list)
    unknown: list[StatGap] = Field(default_factory=list)
    stats_written: dict[str, int] = Field(default_factory=dict)
    description: str | None = None
    programbench_version: str | None = None
    package: ToolVerdict | None = None
    verify: ToolVerdict | None = None

    @property
    def ok(self) -> bool:
        return bool(self.package and self.package.ok and self.verify and self.verify.ok)


class CostStat(RootModel[dict[str, float]]):
    """``_stats/cost.json``: USD per instance, known costs only."""


class CountStat(RootModel[dict[str, int]]):
    """``_stats/calls.json`` (model calls) and ``_stats/tokens.json`` (output tokens)."""


class SeedSystem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: str
    model: str


class SeedManifest(BaseModel):
    """The ``submission.yaml`` written before ``submit package`` when there is none: the
    fields it keeps from an existing file (system.agent, system.model)."""

    model_config = ConfigDict(extra="forbid")

    system: SeedSystem
