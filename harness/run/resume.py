"""Resume: walk the ancestry, check compatibility, compute the settled set (pure logic: the
caller passes what needs Docker, such as the local image ids, in)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.models import Manifest, Outcome, ShardSpec, TaskRow
from harness.core.outcomes import attempt_id, instance_key, split_attempt
from harness.run.ledger import LedgerError, ledger_path, read_ledger, set_aside_torn_tail
from harness.run.manifest import ManifestError, read_manifest, related_root
from harness.run.model import task_key
from harness.run.plan import config_differences

# Config keys an older harness recorded that no longer take part in the comparison:
# ``programbench.eval`` (per task, batch or off, a score is the same official verdict).
RETIRED_CONFIG_KEYS = frozenset({"programbench.eval"})


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
    torn: list[dict[str, str | int]] = field(default_factory=list)  # torn tails set aside

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
    recovery_generation: int = 1  # see :func:`recovery_generation`
    samples: int = 1  # K: attempts per task of this run (``--attempts``)
    ancestor_samples: int = 1  # K of the nearest ancestor

    @property
    def grew_samples(self) -> bool:
        """More attempts per task than the ancestor ran: a new stage, not a recovery."""
        return self.samples > self.ancestor_samples

    @property
    def ancestor_roots(self) -> list[str]:
        return [str(p) for p in self.ancestry.roots]


def walk_ancestry(start: Path, *, set_aside: bool = True) -> Ancestry:
    """Load the run at ``start`` and every ancestor it names, refusing cycles and gaps
    (``set_aside``: a torn last ledger line is moved aside, for a resume; a tool that only
    reads passes False)."""
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
        moved = set_aside_torn_tail(ledger) if set_aside else None  # aside, on record
        if moved is not None:
            ancestry.torn.append(moved)
        try:
            latest = read_ledger(ledger).latest
        except LedgerError as exc:
            raise ResumeError(str(exc), "ancestor_ledger_corrupt") from exc
        ancestry.roots.append(current)
        ancestry.manifests.append(manifest)
        ancestry.rows.append(latest)
        parents = manifest.resume.ancestors
        current = related_root(parents[0], current).resolve() if parents else None
    return ancestry


def samples_of(manifest: Manifest) -> int:
    """K of a run: its attempts per task (``extra.attempts``; 1 when absent)."""
    return manifest.extra.attempts or 1


def attempt_key(benchmark: str, task_id: str, sample: int | None, samples: int) -> str | None:
    """The key of attempt ``sample`` (None: the only one) at a task in a run of ``samples``
    attempts per task: ``benchmark/task`` when K=1, else ``benchmark/task@k``; None when the
    run has no such attempt (k > K)."""
    k = sample or 1
    if k > samples:
        return None
    return instance_key(benchmark, attempt_id(task_id, None if samples == 1 else k))


def rekey(key: str, samples: int) -> str | None:
    """An instance key of a run with another K as this run's key (see :func:`attempt_key`)."""
    benchmark, _, iid = key.partition("/")
    task_id, sample = split_attempt(iid)
    return attempt_key(benchmark, task_id, sample, samples)


def expand_selection(keys: list[str], samples: int) -> list[str]:
    """An ancestor's selection as this run's: each of its tasks, once per attempt (all first
    attempts, then all second ones, ...)."""
    tasks = list(dict.fromkeys(task_key(key) for key in keys))
    out: list[str] = []
    for k in range(1, samples + 1):
        for key in tasks:
            benchmark, _, task_id = key.partition("/")
            new = attempt_key(benchmark, task_id, k, samples)
            if new is not None:
                out.append(new)
    return out


def as_attempt(row: TaskRow, key: str) -> TaskRow:
    """``row`` under this run's key ``key`` (the same attempt of the same task, named for a
    run with another K: ``foo`` <-> ``foo@1``)."""
    if row.key == key:
        return row
    iid = key.partition("/")[2]
    task_id, sample = split_attempt(iid)
    return row.model_copy(update={"instance_id": iid, "sample": sample,
                                  "sample_of": task_id if sample is not None else None})


def original_row(row: TaskRow) -> TaskRow:
    """A row to carry: keep the ancestor's verdict, re-label as carried forward (a row
    carried already keeps its labels). A copy, not a re-validation: the row was validated
    when its ledger was read."""
    if row.outcome is Outcome.CARRIED:
        return row
    run = row.details.run.model_copy(update={"carried_status": row.status,
                                             "carried_outcome": row.outcome.value})
    details = row.details.model_copy(update={"run": run})  # the other sections shared
    return row.model_copy(update={"details": details, "carried_from": row.run_id})


def carry_row(carried: TaskRow, *, run_id: str, worker: str, nodeid: str | None,
              status: str, ts_unix: float) -> TaskRow:
    """The row a resume writes for an instance settled in an ancestor: the ancestor's row
    (see :func:`original_row`) as this run's, skipped with ``settled_in_ancestor``."""
    return carried.model_copy(update={
        "ts_unix": ts_unix, "run_id": run_id, "worker": worker, "nodeid": nodeid,
        "status": status, "outcome": Outcome.CARRIED, "reason_code": "settled_in_ancestor",
        "duration_s": 0.0})


def carry_rows(carried: Mapping[str, TaskRow], keys: list[str], *, run_id: str, worker: str,
               status: Callable[[TaskRow], str], nodeids: Mapping[str, str],
               ts_unix: float) -> list[TaskRow]:
    """The rows a resume writes for those of ``keys`` settled in an ancestor (``carried``),
    in the order of ``keys`` (see :func:`carry_row`)."""
    return [carry_row(row, run_id=run_id, worker=worker, nodeid=nodeids.get(key),
                      status=status(row), ts_unix=ts_unix)
            for key in keys if (row := carried.get(key)) is not None]


def plan_resume(
    start: Path,
    *,
    config: Mapping[str, Any],
    benchmark_versions: Mapping[str, str],
    shard: ShardSpec | None,
    shard_given: bool,
    samples: int | None = None,
) -> ResumePlan:
    """``samples``: this run's attempts per task (None: the nearest ancestor's). A resume
    with another K than its ancestor keys each of its rows by task and attempt (``foo`` is
    ``foo@1``): it completes the attempts the ancestor has not settled and runs the new ones."""
    ancestry = walk_ancestry(start)
    for root, manifest in zip(ancestry.roots, ancestry.manifests, strict=True):
        # A retired key (no longer fingerprinted: it was found not to change results) cannot
        # make an ancestor incompatible; every other difference counts, including a key only
        # the ancestor recorded (an option given then, such as --runtime, and not now).
        diffs = [d for d in config_differences(manifest.config, config)
                 if d not in RETIRED_CONFIG_KEYS]
        if manifest.dry_run:  # prepared only: nothing it holds depends on the agent
            diffs = [d for d in diffs if not d.startswith("agent.")]
        if diffs:
            recorded = ancestry.nearest.resume_command
            how = (f"resume with the run's own command: {recorded}" if recorded
                   else "resume with the same options")
            raise ResumeError(
                f"--resume-from {root}: its configuration differs in {', '.join(diffs)}; "
                f"{how}, or start a fresh run",
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
    before = samples_of(nearest)
    k = before if samples is None else samples
    selection = list(nearest.selection.instance_ids)
    if k != before:
        selection = expand_selection(selection, k)
    carried: dict[str, TaskRow] = {}
    attempts: dict[str, int] = {}
    decided: set[str] = set()
    for latest in ancestry.rows:  # nearest first: the nearest row that exists decides
        for same, row in latest.items():
            key = same if (row.sample is None) == (k == 1) and (row.sample or 1) <= k \
                else attempt_key(row.benchmark, row.task_id, row.sample, k)
            if key is None:  # an attempt beyond this run's K
                continue
            attempts[key] = max(attempts.get(key, 0), row.attempt)
            if key in decided:
                continue
            decided.add(key)
            if row.settled:
                carried[key] = as_attempt(original_row(row), key)
    attempts = {key: n + 1 for key, n in attempts.items() if key not in carried}
    generation = nearest.resume.generation + 1
    return ResumePlan(
        ancestry=ancestry,
        generation=generation,
        selection=selection,
        carried=carried,
        attempts=attempts,
        shard=nearest.shard if not shard_given else shard,
        recovery_generation=recovery_generation(ancestry),
        samples=k,
        ancestor_samples=before,
    )


def grew(manifest: Manifest) -> bool:
    """True when a resume with its own selectors added instances to its ancestor's selection
    (``extra.resume_selection.added``; unknown counts as grown): a new stage, not a
    recovery."""
    change = manifest.extra.resume_selection
    added = change.added if change is not None else None
    return added is None or added > 0


def recovery_generation(ancestry: Ancestry) -> int:
    """The recovery generation of a resume that does not grow its ancestor's selection: 1 +
    the resumes before it that did not grow theirs, back to the run that chose its selection
    (the first run, or a resume whose selectors added instances, such as a gate run grown to
    the whole benchmark, or one that ran more attempts per task than its ancestor: a new stage
    of the campaign). A resume that keeps or narrows its ancestor's selection (``--instance
    X`` again) is a recovery."""
    count = 1
    manifests = ancestry.manifests
    for n, manifest in enumerate(manifests):  # nearest first
        parent = manifests[n + 1] if n + 1 < len(manifests) else None
        if not manifest.resume.ancestors or (
                manifest.selection.source == "collection" and grew(manifest)) or (
                parent is not None and samples_of(manifest) > samples_of(parent)):
            break
        count += 1
    return count


def check_generations(plan: ResumePlan, remaining: int, max_generations: int) -> None:
    """Refuse a recovery past ``--max-recovery-generations`` while work remains (a resume
    whose selection adds instances is not a recovery: the controller does not ask)."""
    if remaining > 0 and plan.recovery_generation > max_generations:
        raise ResumeError(
            f"--resume-from {plan.ancestry.roots[0]}: this would be recovery generation "
            f"{plan.recovery_generation} with {remaining} instance(s) still to run, above "
            f"--max-recovery-generations {max_generations}; investigate the failures or raise "
            f"the limit",
            "max_recovery_generations",
        )


# Provenance a resume must share with every ancestor, and the flag that waives a change.
WAIVER_FLAGS = {
    "seed_changed": "--allow-seed-change",
    "runtime_changed": "--allow-runtime-change",
    "image_changed": "--allow-image-change",
}


@dataclass(frozen=True)
class ProvenanceChange:
    reason: str  # a key of WAIVER_FLAGS
    root: str
    detail: str

    def record(self) -> dict[str, str]:
        return {"reason": self.reason, "ancestor": self.root, "detail": self.detail,
                "waived_by": WAIVER_FLAGS[self.reason]}


def _seed(manifest: Manifest) -> str | None:
    source = manifest.extra.agent_source
    head = source.get("head") if source is not None else None
    return head if isinstance(head, str) else None


def _runtime(manifest: Manifest) -> str | None:
    att = manifest.extra.runtime_attestation
    version = att.get("runtime_version") if att is not None else None
    return version if isinstance(version, str) else None


def _images(rows: Mapping[str, TaskRow]) -> dict[str, str]:
    """``ref -> image id`` of every instance image an ancestor's rows record."""
    out: dict[str, str] = {}
    for row in rows.values():
        image = row.details.engine.image
        if image is not None and isinstance(image.get("ref"), str) \
                and isinstance(image.get("id"), str):
            out[image["ref"]] = image["id"]
    return out


def provenance_changes(ancestry: Ancestry, current: Manifest,
                       image_id: Callable[[str], str | None]) -> list[ProvenanceChange]:
    """What differs between this run and its ancestors: the agent seed commit (the
    ``--agent-repo`` checkout's HEAD; unknown without one), the agent server's
    ``runtime_version``, and the digest of any instance image an ancestor ran (``image_id``
    gives the local one, None when it is not present: not compared)."""
    changes: list[ProvenanceChange] = []
    seed, runtime = _seed(current), _runtime(current)
    for root, manifest, rows in zip(ancestry.roots, ancestry.manifests, ancestry.rows,
                                    strict=True):
        if manifest.dry_run:  # prepared only: no agent ran, no image was used
            continue
        old_seed = _seed(manifest)
        if old_seed != seed:
            changes.append(ProvenanceChange(
                "seed_changed", str(root),
                f"agent seed commit {old_seed or 'unknown (no --agent-repo)'} in {root}, "
                f"{seed or 'unknown (no --agent-repo)'} now"))
        old_runtime = _runtime(manifest)
        if old_runtime is not None and old_runtime != runtime:
            changes.append(ProvenanceChange(
                "runtime_changed", str(root),
                f"agent runtime_version {old_runtime} in {root}, {runtime or 'unknown'} now"))
        for ref, old_id in sorted(_images(rows).items()):
            now = image_id(ref)
            if now is not None and now != old_id:
                changes.append(ProvenanceChange(
                    "image_changed", str(root), f"image {ref} was {old_id} in {root}, {now} now"))
    return changes


def check_provenance(ancestry: Ancestry, current: Manifest, waived: set[str],
                     image_id: Callable[[str], str | None]) -> list[dict[str, str]]:
    """Refuse (ResumeError) a change that is not waived; return every change with its waiver
    (to record in the manifest)."""
    changes = provenance_changes(ancestry, current, image_id)
    for change in changes:
        if change.reason not in waived:
            flag = WAIVER_FLAGS[change.reason]
            raise ResumeError(
                f"--resume-from {ancestry.roots[0]}: {change.detail}; resume with the same "
                f"agent, runtime and images, or waive it with {flag} (recorded)",
                change.reason)
    return [c.record() for c in changes]
