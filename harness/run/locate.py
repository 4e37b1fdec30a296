"""Where a unit's files are, for every tool: the run model's answer, said once.

A unit's files (instance folder, eval output, submission, trajectory) are in the run root
that wrote its effective row: a row a run scored itself is in that run's root; a row a resume
carried forward (``carried_from``) is in the ancestor that scored it; a merged run's rows are
in the shard that wrote them (``extra.merged_from``), and a shard's own carried rows in its
ancestors. :func:`run_roots` walks all of them once, by run id; :func:`row_root` answers for
one row. ProgramBench's kept files, its export, gate and rescore, and Cowork's audit read
these instead of walking manifests their own way.

Reading only: nothing here writes.
"""

from __future__ import annotations

from pathlib import Path

from harness.core.models import Outcome, TaskRow
from harness.run.manifest import ManifestError, read_manifest, related_root
from harness.run.merge import changed_shards

__all__ = ["changed_shards", "is_carried", "row_root", "run_roots"]


def run_roots(run: Path) -> dict[str, Path]:
    """run id -> run root of ``run``, every ancestor its manifest names and, for a merged
    run, every shard it was merged from (and their ancestors), nearest first. A shard whose
    ledger or manifest changed since the merge (:func:`harness.run.merge.changed_shards`) is
    left out: its files are then missing, never read as the merged ones."""
    roots: dict[str, Path] = {}
    queue = [Path(run)]
    while queue:
        root = queue.pop(0)
        try:
            manifest = read_manifest(root)
        except ManifestError:
            continue
        if manifest.run_id in roots:
            continue
        roots[manifest.run_id] = root
        changed = {line.partition(":")[0] for line in changed_shards(root)}
        queue += [related_root(t, root) for t in (*manifest.resume.ancestors,
                                                  *(manifest.extra.merged_from or []))
                  if t not in changed]
    return roots


def is_carried(row: TaskRow) -> bool:
    return row.outcome is Outcome.CARRIED and bool(row.carried_from)


def row_root(row: TaskRow, run: Path, roots: dict[str, Path]) -> Path | None:
    """The run root holding ``row``'s files: the scoring ancestor of a carried row (None when
    it is not among ``roots``), else the run that wrote the row (a shard of a merged run), or
    ``run`` itself."""
    if is_carried(row):
        assert row.carried_from is not None
        return roots.get(row.carried_from)
    return roots.get(row.run_id, Path(run))
