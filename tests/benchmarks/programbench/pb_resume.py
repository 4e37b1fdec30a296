"""A resumed run root written by hand: its manifest names the ancestor, its ledger carries
the ancestor's rows forward (as a resume that re-ran nothing writes them)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from harness.core.models import TaskRow
from harness.run.ledger import LedgerWriter
from harness.run.manifest import read_manifest, write_manifest
from harness.run.resume import carry_row, original_row

RESUMED_RUN_ID = "resumed-run"


def resume_of(ancestor: Path, resumed: Path, rows: Iterable[TaskRow]) -> list[TaskRow]:
    """Write ``resumed`` as a resume of ``ancestor`` carrying ``rows`` (the ancestor's
    effective rows); the carried rows, as appended."""
    manifest = read_manifest(ancestor)
    resumed.mkdir()
    child = manifest.model_copy(deep=True)
    child.run_id, child.run_root = RESUMED_RUN_ID, str(resumed.resolve())
    child.resume.ancestors = [str(ancestor.resolve())]
    child.resume.ancestor_run_ids = [manifest.run_id]
    write_manifest(child, resumed)
    carried = [
        carry_row(
            original_row(r),
            run_id=RESUMED_RUN_ID,
            worker="main",
            nodeid=r.nodeid,
            status="skipped",
            ts_unix=r.ts_unix,
        )
        for r in rows
    ]
    assert LedgerWriter(resumed).append_batch(carried)
    return carried
