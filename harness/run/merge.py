"""``harness merge ROOT... --output DIR``: combine the run roots of a sharded run."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from harness.core.fsutil import atomic_write_json, atomic_write_text
from harness.core.models import (
    MERGE_SCHEMA,
    InfraRetries,
    Manifest,
    ManifestExtra,
    Selection,
    StrictModel,
    TaskRow,
)
from harness.run.ledger import LEDGER_NAME, LedgerError, read_ledger, tally
from harness.run.manifest import (
    ManifestError,
    read_manifest,
    reportability,
    subset_notice,
    write_manifest,
)


class MergeError(ValueError):
    """The shards cannot be merged; the message names the problem and the fix."""


class MergeRecord(StrictModel):
    schema_: str = Field(default=MERGE_SCHEMA, alias="schema")
    created_at_unix: float
    output: str
    shards: list[dict[str, str | int]]
    shard_count: int
    config_fingerprint: str
    selected: int
    rows: int
    counts: dict[str, int]
    mean_score: float | None


@dataclass
class Shard:
    root: Path
    manifest: Manifest
    latest: dict[str, TaskRow]


def load_shard(root: Path) -> Shard:
    try:
        manifest = read_manifest(root)
        latest = read_ledger(root / LEDGER_NAME).latest
    except (ManifestError, LedgerError) as exc:
        raise MergeError(str(exc)) from exc
    return Shard(root=root, manifest=manifest, latest=latest)


def check_shards(shards: list[Shard]) -> int:
    """Disjoint, complete, same fingerprint; returns the shard count N."""
    missing = [str(s.root) for s in shards if s.manifest.shard is None]
    if missing:
        raise MergeError(f"{missing[0]} was not run with --shard; merge takes shard runs only")
    counts = {s.manifest.shard.count for s in shards if s.manifest.shard}
    if len(counts) != 1:
        raise MergeError(f"the runs use different shard counts {sorted(counts)}; "
                         f"merge shards of one --shard I/N split")
    n = counts.pop()
    fingerprints = {s.manifest.config_fingerprint for s in shards}
    if len(fingerprints) != 1:
        raise MergeError("the shards ran with different config fingerprints "
                         f"({', '.join(sorted(fingerprints))}); rerun them with equal options")
    samples = {s.manifest.extra.attempts or 1 for s in shards}
    if len(samples) != 1:
        ks = ", ".join(map(str, sorted(samples)))
        raise MergeError(f"the shards ran different --attempts ({ks}); merge shards of one run")
    index_roots: dict[int, str] = {}
    for s in shards:
        assert s.manifest.shard is not None
        i = s.manifest.shard.index
        if i in index_roots:
            raise MergeError(f"shard {i}/{n} appears twice ({index_roots[i]} and {s.root}); "
                             f"pass each shard once")
        index_roots[i] = str(s.root)
    absent = sorted(set(range(1, n + 1)) - set(index_roots))
    if absent:
        raise MergeError(f"shard(s) {', '.join(f'{i}/{n}' for i in absent)} missing; "
                         f"pass every shard's run root")
    owner: dict[str, str] = {}
    for s in shards:
        for key in s.manifest.selection.instance_ids:
            if key in owner:
                raise MergeError(f"instance {key} is in two shards ({owner[key]} and {s.root}); "
                                 f"the shards are not disjoint")
            owner[key] = str(s.root)
    return n


def merge(roots: list[Path], output: Path) -> MergeRecord:
    output = Path(output)
    if output.exists():
        raise MergeError(f"--output {output} already exists; pass a new directory")
    if not roots:
        raise MergeError("no run roots given; pass the shard run roots to merge")
    shards = [load_shard(Path(r)) for r in roots]
    shards.sort(key=lambda s: s.manifest.shard.index if s.manifest.shard else 0)
    n = check_shards(shards)
    output.mkdir(parents=True)
    selection: list[str] = []
    rows: list[TaskRow] = []
    for s in shards:
        selection.extend(s.manifest.selection.instance_ids)
        rows.extend(s.latest[k] for k in s.manifest.selection.instance_ids if k in s.latest)
    atomic_write_text(output / LEDGER_NAME, "".join(r.dump_line() + "\n" for r in rows))
    figures = tally(selection, {r.key: r for r in rows})
    first = shards[0].manifest
    merged = first.model_copy(deep=True)
    merged.run_id = f"merged-{first.run_id}"
    merged.run_root = str(output.resolve())
    merged.shard = None
    merged.selection = Selection(resolved=True, instance_ids=selection, count=len(selection),
                                 source="collection")
    merged.counts = figures.counts
    merged.outcome_counts = figures.outcome_counts
    merged.mean_score = figures.mean_score
    merged.outcome = "merged"
    merged.exit_code = 0
    sizes = first.extra.benchmark_sizes or {}
    merged.extra = ManifestExtra(
        merged_from=[str(s.root) for s in shards],
        merged_not_reportable=sorted({r for s in shards for r in reportability(s.manifest)}),
        benchmark_sizes=sizes,
    )
    if first.extra.attempts is not None:  # K attempts per task (--attempts)
        merged.extra.attempts = first.extra.attempts
    retries = merged_retries(shards)
    if retries is not None:
        merged.extra.infra_retries = retries
    merged.subset_notice = subset_notice(
        dict(Counter(k.split("/", 1)[0] for k in selection)), sizes)
    write_manifest(merged, output)
    record = MergeRecord(
        created_at_unix=time.time(), output=str(output),
        shards=[{"root": str(s.root), "run_id": s.manifest.run_id,
                 "shard": str(s.manifest.shard)} for s in shards],
        shard_count=n, config_fingerprint=first.config_fingerprint,
        selected=len(selection), rows=len(rows), counts=figures.counts,
        mean_score=figures.mean_score,
    )
    atomic_write_json(output / "merge.json", record)
    return record


def merged_retries(shards: list[Shard]) -> InfraRetries | None:
    """The shards' infrastructure retries (``--retry-infra``), summed by reason code."""
    found = [s.manifest.extra.infra_retries for s in shards
             if s.manifest.extra.infra_retries is not None]
    if not found:
        return None
    by_reason: Counter[str] = Counter()
    for record in found:
        by_reason.update(record.by_reason or {})
    return InfraRetries(limit=found[0].limit, retries=sum(r.retries or 0 for r in found),
                        by_reason=dict(sorted(by_reason.items())))
