"""Run roots written in a test's tmp_path with the runner's own writers (manifest, ledger)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from harness.core.models import ManifestExtra, Outcome, Selection, ShardSpec, TaskRow
from harness.run import manifest as mf
from harness.run.ledger import LedgerWriter, ledger_path
from harness.run.plan import fingerprint

BENCH = "bench"
CONFIG: dict[str, Any] = {"agent.kind": "command", "agent.model": "m", "timeout": 60}


def row(iid: str, outcome: Outcome = Outcome.SCORED, *, run_id: str = "r", attempt: int = 1,
        benchmark: str = BENCH, **fields: Any) -> TaskRow:
    fields.setdefault("score", 1.0 if outcome is Outcome.SCORED else None)
    return TaskRow(ts_unix=1.0, run_id=run_id, benchmark=benchmark, instance_id=iid,
                   status=outcome.value, outcome=outcome, attempt=attempt, **fields)


def write_run(root: Path, *, run_id: str, selection: Iterable[str], rows: Iterable[TaskRow] = (),
              config: dict[str, Any] | None = None, versions: dict[str, str] | None = None,
              ancestors: Iterable[Path] = (), generation: int = 0,
              shard: ShardSpec | None = None, dry_run: bool = False,
              source: Literal["collection", "ancestor"] = "collection", extra: dict[str, Any] | None = None) -> Path:
    """A finished run root: manifest (written by the runner's writer) and ledger (appended
    by the runner's LedgerWriter). ``selection`` holds instance ids of :data:`BENCH`."""
    config = dict(CONFIG if config is None else config)
    manifest = mf.new_manifest(run_id=run_id, run_root=root, argv=["pytest"], dry_run=dry_run,
                               workers=0)
    keys = [f"{BENCH}/{i}" for i in selection]
    manifest.benchmarks = [BENCH]
    manifest.benchmark_versions = dict(versions or {BENCH: "1.0"})
    manifest.config = config
    manifest.config_fingerprint = fingerprint(config)
    manifest.shard = shard
    manifest.selection = Selection(resolved=True, instance_ids=keys, count=len(keys),
                                   source=source)
    manifest.resume.ancestors = [str(Path(a).resolve()) for a in ancestors]
    manifest.resume.generation = generation
    manifest.extra = ManifestExtra.model_validate(
        {**manifest.extra.model_dump(mode="json"), **(extra or {})})
    root.mkdir(parents=True)
    mf.write_manifest(manifest)
    ledger_path(root).touch()
    writer = LedgerWriter(root)
    for r in rows:
        writer.append(r)
    mf.finalize(manifest, outcome="completed", exit_code=0)
    return root
