"""``run_manifest.json``: written atomically before the first instance, checkpointed during
the run, finalized with outcome and exit code on every exit path (refusals included)."""

from __future__ import annotations

import os
import platform
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness import __version__
from harness.core.fsutil import atomic_write_json, read_json
from harness.core.git import repo_provenance
from harness.core.models import Checkpoint, GitState, HostLoad, Manifest, ManifestExtra, Versions

MANIFEST_NAME = "run_manifest.json"
PLAN_NAME = "plan.json"


class ManifestError(ValueError):
    """A manifest that cannot be read; the message names the file and the fix."""


def related_root(recorded: str | os.PathLike[str], near: Path) -> Path:
    """The run root a manifest names (an ancestor, a merged shard) as ``recorded``, else,
    when that path is gone, the root of the same name beside ``near`` (the root that names
    it): run roots moved together keep their chain (CI artifacts unpacked on another machine,
    a campaign's folder copied elsewhere)."""
    path = Path(recorded)
    if path.is_dir():
        return path
    beside = Path(near).parent / path.name
    return beside if (beside / MANIFEST_NAME).is_file() else path


def manifest_path(run_root: Path) -> Path:
    return Path(run_root) / MANIFEST_NAME


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def versions() -> Versions:
    return Versions(
        harness=__version__,
        python=platform.python_version(),
        pytest=_version("pytest") or "unknown",
        xdist=_version("pytest-xdist"),
        platform=platform.platform(),
    )


def source_state() -> GitState:
    """Git state of the runner's own checkout (head, branch, describe, dirty, digests)."""
    prov = repo_provenance(Path(__file__).resolve().parents[2])
    if not prov.git_available:
        return GitState(available=False, error=prov.git_error)
    return GitState(available=True, head=prov.head, branch=prov.branch,
                    describe=prov.describe, dirty=prov.dirty,
                    status_sha256=prov.status_sha256,
                    tracked_diff_sha256=prov.tracked_diff_sha256)


def new_manifest(
    *, run_id: str, run_root: Path, argv: list[str], dry_run: bool, workers: int
) -> Manifest:
    now = time.time()
    return Manifest(
        run_id=run_id,
        run_root=str(Path(run_root).resolve()),
        created_at_unix=now,
        created_at=datetime.fromtimestamp(now, UTC).isoformat(),
        argv=list(argv),
        cwd=str(Path.cwd()),
        versions=versions(),
        source=source_state(),
        dry_run=dry_run,
        workers=workers,
        extra=ManifestExtra(host_load=HostLoad(cpus=os.cpu_count() or 1,
                                               start=list(os.getloadavg()))),
    )


def reportability(manifest: Manifest) -> list[str]:
    """Why the run's figures are not reportable (empty: reportable). A reportable run names
    a clean agent checkout (``--agent-repo``, the seed gate) and waived nothing on resume,
    nor anything of a benchmark's own (``extra.not_reportable_by_benchmark``: name ->
    reasons, e.g. Cowork's ``--cowork-allow-dirty-bench``)."""
    extra = manifest.extra
    if extra.merged_from is not None:  # harness merge: the union of its shards' reasons
        return list(extra.merged_not_reportable or [])
    reasons: list[str] = []
    if manifest.dry_run:
        reasons.append("dry run: no agent ran")
    source = extra.agent_source
    if source is None:
        reasons.append("no --agent-repo: the agent's source checkout is unknown (no seed gate)")
    elif source.get("dirty") is True:
        reasons.append(f"dirty agent checkout {source.get('repo_dir')} (--allow-dirty-seed is "
                       f"for development diagnostics)")
    elif source.get("dirty") is None or not source.get("head"):
        reasons.append(f"agent checkout {source.get('repo_dir')}: commit or status unknown")
    attestation = extra.runtime_attestation
    if attestation is not None and attestation.get("overridden"):
        reasons.append("agent runtime skew waived (--allow-runtime-skew)")
    by_benchmark = extra.not_reportable_by_benchmark or {}  # a benchmark's waivers
    for name in sorted(by_benchmark):
        reasons.extend(by_benchmark[name])
    waived = (extra.resume_provenance.waived if extra.resume_provenance else None) or []
    for record in waived:
        if isinstance(record, dict):
            reasons.append(f"resume waived {record.get('reason')} ({record.get('waived_by')})")
    return reasons


def write_manifest(manifest: Manifest, run_root: Path | None = None) -> Path:
    path = manifest_path(Path(run_root or manifest.run_root))
    manifest.not_reportable = reportability(manifest)
    manifest.reportable = not manifest.not_reportable
    atomic_write_json(path, manifest)
    return path


def checkpoint(manifest: Manifest, phase: str) -> None:
    manifest.checkpoint = Checkpoint(phase=phase, at_unix=time.time())
    write_manifest(manifest)


def finalize(
    manifest: Manifest,
    *,
    outcome: str,
    exit_code: int,
    stop_reason: str | None = None,
    error: BaseException | None = None,
) -> None:
    manifest.outcome = outcome
    manifest.exit_code = exit_code
    if stop_reason is not None:
        manifest.stop_reason = stop_reason
    if error is not None:
        manifest.error = {"type": type(error).__name__, "message": str(error)[:4000]}
    manifest.finished_at_unix = time.time()
    if manifest.extra.host_load is None:
        manifest.extra.host_load = HostLoad(cpus=os.cpu_count() or 1)
    manifest.extra.host_load.end = list(os.getloadavg())  # the gate warns when overloaded
    manifest.checkpoint = Checkpoint(phase="finalized", at_unix=manifest.finished_at_unix)
    write_manifest(manifest)


def read_manifest(run_root: Path) -> Manifest:
    path = manifest_path(run_root)
    if not path.exists():
        raise ManifestError(
            f"{run_root} is not a run root: {MANIFEST_NAME} is missing; "
            f"pass the directory of an earlier run (it holds {MANIFEST_NAME})"
        )
    try:
        data: Any = read_json(path)
        return Manifest.model_validate(data)
    except (ValueError, ValidationError) as exc:
        raise ManifestError(
            f"{path} is corrupt ({type(exc).__name__}); it cannot be used: "
            f"pick another run root or restore the file"
        ) from exc
