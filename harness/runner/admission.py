"""A run's admission: its run root is never reused; a resume's (``--resume-from``) plan
from the ancestors (what is carried, which attempts, K, the shard), the checks that it
continues the same work (recovery generations, the agent's seed, runtime and images), and
how its selection changed."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.core.errors import RefusalError
from harness.core.models import Manifest, Plan, Refusal, ResumeProvenance
from harness.run import manifest as mf
from harness.run.resume import (
    ResumeError,
    ResumePlan,
    check_generations,
    check_provenance,
    plan_resume,
)
from harness.runner.instance import RunContext
from harness.runner.options import RunOptions


def selection_change(ancestor: list[str], now: list[str]) -> dict[str, int]:
    """How a resume with its own selectors (``--task-file``, ``--all-instances``, -k, ...)
    changed its ancestor's selection: a gate run grown to the full benchmark adds."""
    before, after = set(ancestor), set(now)
    return {"ancestor_selected": len(before), "selected": len(after),
            "added": len(after - before), "left_out": len(before - after)}


def local_image_ids() -> Callable[[str], str | None]:
    """A resolver ``ref -> id`` of local images for the resume's provenance check (one
    Docker client, made on first use); None when the image is not present or Docker cannot
    tell (the instance then fails on its own with the runner's image error)."""
    client: list[Any] = []

    def resolve(ref: str) -> str | None:
        try:
            if not client:
                from harness.sandbox.client import get_client

                client.append(get_client())
            return str(client[0].api.inspect_image(ref)["Id"])
        except Exception:  # absent image, or no Docker: nothing to compare
            return None

    return resolve


def admit_resume(options: RunOptions, run: RunContext, manifest: Manifest,
                 config_dict: dict[str, Any], versions: dict[str, str]) -> ResumePlan:
    """The resume's plan, set on ``run.plan`` and recorded in ``manifest``; a resume that
    cannot continue its ancestors is refused (one line, exit 2)."""
    assert options.resume_from is not None  # called for a resume only
    try:
        rp = plan_resume(Path(options.resume_from), config=config_dict,
                         benchmark_versions=versions, shard=run.plan.shard,
                         shard_given=options.shard_given, samples=run.samples)
    except ResumeError as exc:
        raise RefusalError(str(exc), stage="resume", reason=exc.reason) from exc
    run.ancestry = rp.ancestry
    if rp.samples != rp.ancestor_samples:  # a resume keeps this K unless given another
        manifest.extra.attempts = rp.samples
    selection = None if options.selectors_given else rp.selection
    remaining = [k for k in rp.selection if k not in rp.carried]
    try:
        if selection is not None and not rp.grew_samples:  # a recovery (more attempts per
            # task is a new stage); selectors: see Controller.check_resume_selection
            check_generations(rp, len(remaining), options.max_recovery_generations)
    except ResumeError as exc:
        raise RefusalError(str(exc), stage="resume", reason=exc.reason) from exc
    run.plan = Plan(
        run_id=run.run_id, created_at_unix=run.plan.created_at_unix,
        dry_run=run.plan.dry_run, shard=rp.shard, selection=selection,
        carried=rp.carried, attempts=rp.attempts, ancestors=rp.ancestor_roots,
    )
    manifest.shard = rp.shard
    manifest.resume.ancestors = rp.ancestor_roots
    manifest.resume.ancestor_run_ids = [a.run_id for a in rp.ancestry.manifests]
    if rp.ancestry.torn:  # torn last lines of ancestors' ledgers, set aside (issue 41)
        manifest.extra.torn_tails_set_aside = list(rp.ancestry.torn)
    manifest.resume.generation = rp.generation
    return rp


def check_resume_provenance(config: pytest.Config, rp: ResumePlan,
                            manifest: Manifest) -> None:
    """After the admission steps recorded this run's agent seed and runtime: a resume must
    match every ancestor's, or name the waiver (recorded in the manifest)."""
    waived = {reason for reason, option in (("seed_changed", "allow_seed_change"),
                                            ("runtime_changed", "allow_runtime_change"),
                                            ("image_changed", "allow_image_change"))
              if config.getoption(option)}
    try:
        records = check_provenance(rp.ancestry, manifest, waived, local_image_ids())
    except ResumeError as exc:
        raise RefusalError(str(exc), stage="resume", reason=exc.reason) from exc
    manifest.extra.resume_provenance = ResumeProvenance(waived=records)


def refuse_reused_root(run_id: str, root: Path, argv: list[str], exit_code: int) -> None:
    """An existing ``--run-root`` is refused: the refusal's manifest goes to a sibling folder
    (the existing run is never touched)."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    sibling = root.parent / f"{root.name}-refused-{stamp}-{os.getpid()}"
    message = (
        f"--run-root {root} already exists: run roots are never reused; pass a new "
        f"--run-root, or --resume-from {root} to continue that run"
    )
    manifest = mf.new_manifest(run_id=run_id, run_root=sibling, argv=argv,
                               dry_run=False, workers=0)
    manifest.refusal = Refusal(stage="run_root", reason="run_root_exists", message=message)
    manifest.extra.refused_run_root = str(root)
    sibling.mkdir(parents=True)
    mf.finalize(manifest, outcome="refused", exit_code=exit_code)
    raise RefusalError(message, stage="run_root", reason="run_root_exists")
