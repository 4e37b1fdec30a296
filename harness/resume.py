"""Resume: walk the ancestry, check compatibility, compute the settled set (pure logic)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.ledger import LedgerError, ledger_path, read_ledger
from harness.manifest import ManifestError, read_manifest
from harness.models import Manifest, Outcome, ShardSpec, TaskRow
from harness.plan import config_differences


class ResumeError(ValueError):
    """A resume that must be refused; ``reason`` is a stable code, the message one line."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class Ancestry:
    roots: list[Path] = field(default_factory=list)  # nearest first
    manifests: list[Manifest] = field(default_factory=list)
    rows: list[dict[str, TaskRow]] = field(default_factory=list)  # latest rows, per ancestor

    @property
    def nearest(self) -> Manifest:
        return self.manifests[0]


@dataclass
class ResumePlan:
    ancestry: Ancestry
    generation: int
    selection: list[str]
    carried: dict[str, TaskRow]
    attempts: dict[str, int]
    shard: ShardSpec | None

    @property
    def ancestor_roots(self) -> list[str]:
        return [str(p) for p in self.ancestry.roots]


def walk_ancestry(start: Path) -> Ancestry:
    """Load the run at ``start`` and every ancestor it names, refusing cycles and gaps."""
    ancestry = Ancestry()
    seen: set[Path] = set()
    current: Path | None = Path(start).resolve()
    while current is not None:
        if current in seen:
            raise ResumeError(
                f"--resume-from {start}: the ancestry has a cycle at {current}; "
                f"resume from a run whose ancestors are distinct",
                "ancestry_cycle",
            )
        seen.add(current)
        if not current.is_dir():
            raise ResumeError(
                f"--resume-from {current} is not a run root (no such directory); "
                f"pass the directory of an earlier run",
                "ancestor_missing",
            )
        try:
            manifest = read_manifest(current)
        except ManifestError as exc:
            raise ResumeError(str(exc), "ancestor_manifest") from exc
        ledger = ledger_path(current)
        if not ledger.exists():
            raise ResumeError(
                f"--resume-from {current}: its ledger {ledger.name} is missing; "
                f"a run root without a ledger cannot be resumed, start a fresh run",
                "ancestor_ledger_missing",
            )
        try:
            latest = read_ledger(ledger).latest
        except LedgerError as exc:
            raise ResumeError(str(exc), "ancestor_ledger_corrupt") from exc
        ancestry.roots.append(current)
        ancestry.manifests.append(manifest)
        ancestry.rows.append(latest)
        parents = manifest.resume.ancestors
        current = Path(parents[0]).resolve() if parents else None
    return ancestry


def original_row(row: TaskRow) -> TaskRow:
    """A row to carry: keep the ancestor's verdict, re-label as carried forward."""
    data = row.model_dump(by_alias=True)
    details = dict(data.get("details") or {})
    if row.outcome is not Outcome.CARRIED:
        details["carried_status"] = row.status
        details["carried_outcome"] = row.outcome.value
        data["carried_from"] = row.run_id
    data["details"] = details
    return TaskRow.model_validate(data)


def plan_resume(
    start: Path,
    *,
    config: Mapping[str, Any],
    benchmark_versions: Mapping[str, str],
    shard: ShardSpec | None,
    shard_given: bool,
) -> ResumePlan:
    ancestry = walk_ancestry(start)
    for root, manifest in zip(ancestry.roots, ancestry.manifests, strict=True):
        diffs = config_differences(manifest.config, config)
        if manifest.dry_run:  # prepared only: nothing it holds depends on the agent
            diffs = [d for d in diffs if not d.startswith("agent.")]
        if diffs:
            raise ResumeError(
                f"--resume-from {root}: its configuration differs in {', '.join(diffs)}; "
                f"resume with the same options or start a fresh run",
                "config_mismatch",
            )
        version_diffs = config_differences(manifest.benchmark_versions, benchmark_versions)
        if version_diffs:
            raise ResumeError(
                f"--resume-from {root}: benchmark version differs for "
                f"{', '.join(version_diffs)}; install the version the run used or start fresh",
                "benchmark_version_mismatch",
            )
    nearest = ancestry.nearest
    if shard_given and nearest.shard != shard:
        raise ResumeError(
            f"--shard {shard} differs from the ancestor's shard {nearest.shard}; "
            f"drop --shard to reuse the frozen one",
            "shard_mismatch",
        )
    selection = list(nearest.selection.instance_ids)
    carried: dict[str, TaskRow] = {}
    attempts: dict[str, int] = {}
    decided: set[str] = set()
    for latest in ancestry.rows:  # nearest first: the nearest row that exists decides
        for key, row in latest.items():
            attempts[key] = max(attempts.get(key, 0), row.attempt)
            if key in decided:
                continue
            decided.add(key)
            if row.settled:
                carried[key] = original_row(row)
    attempts = {key: n + 1 for key, n in attempts.items() if key not in carried}
    generation = nearest.resume.generation + 1
    return ResumePlan(
        ancestry=ancestry,
        generation=generation,
        selection=selection,
        carried=carried,
        attempts=attempts,
        shard=nearest.shard if not shard_given else shard,
    )


def check_generations(plan: ResumePlan, remaining: int, max_generations: int) -> None:
    if remaining > 0 and plan.generation > max_generations:
        raise ResumeError(
            f"--resume-from {plan.ancestry.roots[0]}: this would be recovery generation "
            f"{plan.generation} with {remaining} instance(s) still to run, above "
            f"--max-recovery-generations {max_generations}; investigate the failures or raise "
            f"the limit",
            "max_recovery_generations",
        )
