"""Load one run root into the instance results the report and comparison work on.

A run's figures are a pure function of its manifest and ledger: the denominator is the
manifest's selection, the last ledger row per instance wins, and a carried-forward row
stands for the ancestor's verdict it carries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harness.core.models import Manifest, Outcome, TaskRow
from harness.run.ledger import LedgerError, ledger_path, read_ledger
from harness.run.manifest import ManifestError, read_manifest
from reports.errors import ReportInputError
from reports.figures import InstanceResult
from reports.metrics import missing_result, result_from_row


@dataclass
class RunData:
    root: Path
    manifest: Manifest
    rows: dict[str, TaskRow]  # last row per key
    results: list[InstanceResult]  # one per selected key, sorted by key
    outside: list[InstanceResult]  # rows whose key is not in the selection
    selected: int  # the denominator
    warnings: list[str] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def by_key(self) -> dict[str, InstanceResult]:
        return {r.key: r for r in self.results}


def as_result_row(row: TaskRow) -> TaskRow:
    """A carried-forward row restated with the ancestor's status
    (``details.run.carried_status``)."""
    carried_status = row.details.run.carried_status
    carried = row.outcome is Outcome.CARRIED or row.carried_from is not None
    if carried and isinstance(carried_status, str) and carried_status:
        return row.model_copy(update={"status": carried_status})
    return row


def _read_rows(root: Path) -> tuple[dict[str, TaskRow], bool]:
    path = ledger_path(root)
    try:
        read = read_ledger(path)
    except LedgerError as exc:
        raise ReportInputError(str(exc)) from exc
    except (UnicodeDecodeError, OSError) as exc:
        raise ReportInputError(
            f"{path} cannot be read ({type(exc).__name__}); restore the file from a copy"
        ) from exc
    return read.latest, read.torn_tail


def load_run(root: Path | str) -> RunData:
    """Read ``root`` (a run root); raise :class:`ReportInputError` with a one-line fix."""
    root = Path(root)
    if not root.is_dir():
        raise ReportInputError(
            f"{root} is not a run root (no such directory); pass the directory of a run "
            f"(it holds run_manifest.json)"
        )
    try:
        manifest = read_manifest(root)
    except ManifestError as exc:
        raise ReportInputError(str(exc)) from exc
    rows, torn = _read_rows(root)
    warnings: list[str] = []
    if torn:
        warnings.append("the ledger's last line is torn (a crash mid-write) and was skipped")
    if not ledger_path(root).exists():
        warnings.append("the run has no ledger yet: no instance has finished")
    if not manifest.finalized:
        warnings.append(
            "the manifest is not finalized: the run is still going or was killed; "
            "figures cover the rows written so far"
        )

    selection = manifest.selection
    keys = list(dict.fromkeys(selection.instance_ids))
    selected = selection.count
    if not keys and rows:
        keys = sorted(rows)
        selected = len(keys)
        warnings.append(
            "the manifest lists no selection; the denominator falls back to the ledger's "
            f"{selected} instances"
        )
    elif selected != len(keys):
        warnings.append(
            f"the manifest's selection count ({selected}) differs from the {len(keys)} "
            "instances it lists; unlisted ones count as not attempted"
        )
    wanted = set(keys)
    results = [
        result_from_row(as_result_row(rows[key])) if key in rows else missing_result(key)
        for key in sorted(keys)
    ]
    outside = [
        result_from_row(as_result_row(row), in_selection=False)
        for key, row in sorted(rows.items())
        if key not in wanted
    ]
    if outside:
        warnings.append(
            f"{len(outside)} ledger row(s) are outside the manifest's selection and are not counted"
        )
    return RunData(
        root=root,
        manifest=manifest,
        rows=rows,
        results=results,
        outside=outside,
        selected=max(selected, len(keys)),
        warnings=warnings,
    )
