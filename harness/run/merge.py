"""``harness merge ROOT... --output DIR``: combine the run roots of a sharded run."""

from __future__ import annotations

import hashlib
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
    Outcome,
    Selection,
    StrictModel,
    TaskRow,
)
from harness.run.ledger import LEDGER_NAME, LedgerError, apply_tally, read_ledger, tally
from harness.run.manifest import (
    ManifestError,
    manifest_path,
    read_manifest,
    reportability,
    write_manifest,
)
from harness.run.model import RunModel, task_key

MERGE_NAME = "merge.json"


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
    missing: list[str] = Field(default_factory=list)  # units without a final row
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


# Rows that say a unit's work was not done: the run ended, or a budget or stop kept it back.
NOT_FINAL = frozenset({Outcome.BLOCKED, Outcome.NOT_ATTEMPTED})


def coverage(shards: list[Shard]) -> tuple[RunModel, list[str], list[TaskRow]]:
    """The run the shards split (their tasks, K attempts each), its units without a final
    row in the shard that owns them, and the final rows, in the model's order."""
    first = shards[0].manifest
    tasks = [k for s in shards for k in s.manifest.selection.instance_ids]
    model = RunModel.of_keys(tasks, first.extra.attempts or 1)
    owner = {task_key(k): s for s in shards for k in s.manifest.selection.instance_ids}
    rows: list[TaskRow] = []
    missing: list[str] = []
    for unit in model.units:
        row = owner[task_key(unit)].latest.get(unit)
        if row is None or row.outcome in NOT_FINAL:
            missing.append(unit)
        else:
            rows.append(row)
    return model, missing, rows


def merge(roots: list[Path], output: Path, *, accept_partial: bool = False) -> MergeRecord:
    """Merge the shards of one run into ``output``. Every unit of the run (each task of the
    shards, K attempts each) must have a final row, else :class:`MergeError` names the
    missing ones (``accept_partial``: merged anyway, not reportable)."""
    output = Path(output)
    if output.exists():
        raise MergeError(f"--output {output} already exists; pass a new directory")
    if not roots:
        raise MergeError("no run roots given; pass the shard run roots to merge")
    shards = [load_shard(Path(r)) for r in roots]
    shards.sort(key=lambda s: s.manifest.shard.index if s.manifest.shard else 0)
    n = check_shards(shards)
    model, missing, rows = coverage(shards)
    units = len(model.units)
    incomplete = (f"incomplete: {units - len(missing)} of {units} units have a final row "
                  f"(missing {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''})")
    if missing and not accept_partial:
        raise MergeError(f"{incomplete}; resume the shards that lack them, or pass "
                         "--accept-partial (the merged run is then not reportable)")
    output.mkdir(parents=True)
    selection = model.units
    atomic_write_text(output / LEDGER_NAME, "".join(r.dump_line() + "\n" for r in rows))
    figures = tally(selection, {r.key: r for r in rows})
    first = shards[0].manifest
    merged = first.model_copy(deep=True)
    merged.run_id = f"merged-{first.run_id}"
    merged.run_root = str(output.resolve())
    merged.shard = None
    merged.selection = Selection(resolved=True, instance_ids=selection, count=len(selection),
                                 source="collection")
    merged.outcome = "merged"
    merged.exit_code = 0
    sizes = first.extra.benchmark_sizes or {}
    merged.extra = ManifestExtra(
        merged_from=[str(s.root) for s in shards],
        merged_not_reportable=sorted({r for s in shards for r in reportability(s.manifest)}
                                     | ({incomplete} if missing else set())),
        benchmark_sizes=sizes,
    )
    apply_tally(merged, figures)  # the counts and both means, as a run's own
    if first.extra.attempts is not None:  # K attempts per task (--attempts)
        merged.extra.attempts = first.extra.attempts
    retries = merged_retries(shards)
    if retries is not None:
        merged.extra.infra_retries = retries
    merged.subset_notice = RunModel.of_manifest(merged).notice(sizes)
    write_manifest(merged, output)
    record = MergeRecord(
        created_at_unix=time.time(), output=str(output),
        shards=[{"root": str(s.root), "run_id": s.manifest.run_id,
                 "shard": str(s.manifest.shard), **shard_checksums(s.root)} for s in shards],
        shard_count=n, config_fingerprint=first.config_fingerprint,
        selected=len(selection), rows=len(rows), missing=missing, counts=figures.counts,
        mean_score=figures.mean_score,
    )
    atomic_write_json(output / MERGE_NAME, record)
    return record


def shard_checksums(root: Path) -> dict[str, str]:
    """sha256 of a shard's ledger and manifest: what a merged root's rows and files are read
    from, recorded so that a shard changed after the merge is not read as the merged one."""
    out = {}
    for name, path in (("ledger_sha256", root / LEDGER_NAME),
                       ("manifest_sha256", manifest_path(root))):
        out[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def changed_shards(merged: Path) -> list[str]:
    """The shard roots of a merged run whose ledger or manifest is not what was merged (or
    is gone): one line each, naming the file; [] when ``merged`` is not a merged root."""
    try:
        record = MergeRecord.model_validate_json((Path(merged) / MERGE_NAME).read_bytes())
    except (OSError, ValueError):
        return []
    out = []
    for shard in record.shards:
        root = Path(str(shard["root"]))
        try:
            now = shard_checksums(root)
        except OSError:
            out.append(f"{root}: gone since the merge")
            continue
        out += [f"{root}: {name.removesuffix('_sha256')} changed since the merge"
                for name, want in now.items() if shard.get(name) not in (None, want)]
    return out


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
