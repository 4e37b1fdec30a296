"""Official parity: the run's per-instance scores and headline against ``programbench info``.

``programbench info <run>/programbench`` prints the official table over the eval.json files
it finds: one line per instance (``✅`` for a solved instance, else the score as a rounded
percentage, then a comment) and an ``Average`` line (rounded percentage over those files,
and their count). Every ledger row that carries an official score is compared with its line,
at the table's own precision, and the run's mean over the same instances with the Average
line. A disagreement is never settled by picking one side: the instance gets a superseding
error row (``infra_failed``, ``official_parity_mismatch``, both values in the error) and the
manifest records the parity report (``official_parity``).

Parity covers exactly the scores this run's evaluations produced: ``programbench info`` reads
this run root only, so a score carried forward from an ancestor by ``--resume-from`` (its
eval.json lies in the ancestor's root, checked by the ancestor's own parity) is neither
compared nor rewritten, and the headline is compared over the same instances on both sides.
The report counts the carried scores it left alone (``carried``).
"""

from __future__ import annotations

import re
import time

from pydantic import BaseModel, ConfigDict, Field

from harness.api import Outcome, TaskRow

PARITY_MISMATCH = "official_parity_mismatch"
SOLVED_MARK = "✅"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_ID = re.compile(r"^[A-Za-z0-9][\w.-]*__[\w.-]+$")


class InfoLine(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instance_id: str
    solved: bool
    percent: str  # the table's text: "✅" or a rounded percentage such as "47"
    comment: str = ""


class InfoSummary(BaseModel):
    """What ``programbench info`` printed, parsed."""

    model_config = ConfigDict(extra="forbid")

    lines: dict[str, InfoLine] = Field(default_factory=dict)
    average_percent: str | None = None
    instances: int | None = None


class Mismatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instance_id: str
    ours: str
    official: str


class ParityFailure(BaseModel):
    """``extra.official_parity`` when ``programbench info`` failed: nothing was checked."""

    model_config = ConfigDict(extra="forbid")

    ok: bool = False
    error: str


class ParityReport(BaseModel):
    """``extra.official_parity`` (the manifest's section of this benchmark)."""

    model_config = ConfigDict(extra="forbid")

    checked: int
    ok: bool
    mismatches: list[Mismatch] = Field(default_factory=list)
    headline_ours: str | None = None
    headline_official: str | None = None
    headline_instances_ours: int = 0
    headline_instances_official: int | None = None
    headline_ok: bool = True
    carried: int = 0  # scores carried from an ancestor run: its parity, never rewritten here
    # instances refused by name (build_needs_root): not compared, headline not compared
    refused: list[str] = Field(default_factory=list)


def percent_text(score: float) -> str:
    """A score as the official table prints it."""
    return SOLVED_MARK if score == 1.0 else f"{score * 100:.0f}"


def parse_info(text: str) -> InfoSummary:
    summary = InfoSummary()
    for raw in text.splitlines():
        line = _ANSI.sub("", raw).strip()
        parts = line.split(None, 2)
        if len(parts) < 2:
            continue
        if parts[0] == "Average":
            summary.average_percent = parts[1]
            count = re.search(r"(\d+)\s+instances?", line)
            summary.instances = int(count.group(1)) if count else None
        elif _ID.match(parts[0]):
            summary.lines[parts[0]] = InfoLine(
                instance_id=parts[0], solved=parts[1] == SOLVED_MARK, percent=parts[1],
                comment=parts[2] if len(parts) > 2 else "")
    return summary


def _scored(row: TaskRow) -> bool:
    return (row.benchmark == "programbench" and row.official_eval_status == "completed"
            and row.score is not None)


def _official_rows(latest: dict[str, TaskRow]) -> dict[str, TaskRow]:
    """The rows whose official score this run's evaluations produced (not carried ones)."""
    return {r.instance_id: r for r in latest.values()
            if _scored(r) and r.outcome is not Outcome.CARRIED}


REFUSED = "build_needs_root"  # verdict.BUILD_NEEDS_ROOT: the eval's score not taken


def cross_check(info: InfoSummary, latest: dict[str, TaskRow]) -> ParityReport:
    """Compare every row this run scored officially, and the mean over them, with ``info``
    (``programbench info`` over this run root). Carried rows are counted, never checked. A
    row refused by name (``build_needs_root``: the official eval scored a build the
    separated judge does not run as root) has no score to compare: its line is left out,
    and so is the headline (the official average counts it), said in ``refused``."""
    refused = sorted(r.instance_id for r in latest.values() if r.reason_code == REFUSED)
    if refused:
        info = info.model_copy(update={"lines": {
            k: v for k, v in info.lines.items() if k not in refused}})
    rows = _official_rows(latest)
    carried = sum(1 for r in latest.values() if _scored(r) and r.outcome is Outcome.CARRIED)
    mismatches: list[Mismatch] = []
    for iid, row in sorted(rows.items()):
        assert row.score is not None
        ours = percent_text(float(row.score))
        line = info.lines.get(iid)
        if line is None:
            mismatches.append(Mismatch(instance_id=iid, ours=ours, official="absent"))
        elif line.percent != ours or line.solved != bool(row.resolved):
            mismatches.append(Mismatch(instance_id=iid, ours=f"{ours} (resolved "
                                       f"{bool(row.resolved)})", official=line.percent))
    for iid in sorted(set(info.lines) - set(rows)):
        mismatches.append(Mismatch(instance_id=iid, ours="no official score in the ledger",
                                   official=info.lines[iid].percent))
    mean = sum(float(r.score or 0.0) for r in rows.values()) / len(rows) if rows else 0.0
    ours_head = f"{mean * 100:.0f}"
    headline_ok = bool(refused) or (
        info.average_percent == ours_head and info.instances == len(rows))
    return ParityReport(
        checked=len(rows), ok=not mismatches and headline_ok, mismatches=mismatches,
        headline_ours=ours_head, headline_official=info.average_percent,
        headline_instances_ours=len(rows), headline_instances_official=info.instances,
        headline_ok=headline_ok, carried=carried, refused=refused)


def mismatch_row(row: TaskRow, mismatch: Mismatch, status: str) -> TaskRow:
    """The superseding error row of an instance whose score disagrees with the official
    summary (``status``: the adapter's word for ``infra_failed``)."""
    data = row.model_dump(by_alias=True)
    data.update(
        ts_unix=time.time(), status=status, outcome=Outcome.INFRA_FAILED.value,
        reason_code=PARITY_MISMATCH, infra=True, score=None, resolved=None,
        near_resolved=None, official_eval_status="error",
        error=(f"official parity: the ledger scored {mismatch.instance_id} {mismatch.ours}, "
               f"programbench info says {mismatch.official}"),
    )
    details = data.setdefault("details", {})
    details["eval"] = {**details.get("eval", {}), "official_parity": mismatch.model_dump()}
    return TaskRow.model_validate(data)
