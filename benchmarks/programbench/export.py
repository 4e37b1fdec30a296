"""``harness programbench export RUN --output NEW``: an eval-ready tree of a run's submissions.

Copies every non-empty ``<run>/programbench/<iid>/submission.tar.gz`` to
``NEW/<iid>/submission.tar.gz`` (directly a ``programbench eval`` source), and writes
``NEW/export_manifest.json`` and ``NEW/instance_order.json``. ``NEW`` must not exist: an
export never mixes with an older tree. Requested instances are the run's selection (from
``run_manifest.json``) plus every instance folder present; ``--filter`` narrows them.

A resumed run holds no submission of an instance it carried forward: that submission is in
the ancestor run that scored it; a merged run holds none at all: each is in the shard that
ran it. The export copies each from where the run model says it is (the row's own run,
``kept_files``), only when its sha256 is the one the scored row recorded, and names the
source run (``files[].source_run``): a resume or a merge loses no submission.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from benchmarks.programbench import BENCHMARK
from benchmarks.programbench.order import InstanceOrder
from harness.api import (
    LedgerError,
    ManifestError,
    TaskRow,
    atomic_write_text,
    changed_shards,
    hash_untrusted_file,
    read_manifest,
    run_roots,
)

EXPORT_SCHEMA = "harness.programbench.export.v1"
SUBMISSION = "submission.tar.gz"


class ExportedFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instance_id: str
    sha256: str
    size_bytes: int
    source_run: str | None = None  # the ancestor run root of a carried instance's submission


class ExportManifest(BaseModel):
    """``export_manifest.json`` (the seed's keys, plus hashes)."""

    model_config = ConfigDict(extra="forbid")

    schema_: str = Field(default=EXPORT_SCHEMA, alias="schema")
    source_run: str
    dest_run: str
    created_at_unix: float
    filter: str | None = None
    requested: int
    copied: int
    missing_submission: int
    copied_ids: list[str] = Field(default_factory=list)
    missing_ids: list[str] = Field(default_factory=list)  # no tarball, or an empty file
    files: list[ExportedFile] = Field(default_factory=list)


class ExportOrder(InstanceOrder):
    exported_from: str


def _selected_ids(run: Path) -> list[str]:
    try:
        keys = read_manifest(run).selection.instance_ids
    except ManifestError:
        return []  # no (readable) manifest: the instance folders present decide
    prefix = f"{BENCHMARK}/"
    return [k[len(prefix) :] for k in keys if k.startswith(prefix)]


def requested_ids(run: Path, filter_spec: str | None = None) -> list[str]:
    folder = run / BENCHMARK
    present = [d.name for d in folder.iterdir() if d.is_dir()] if folder.is_dir() else []
    ids = sorted(set(_selected_ids(run)) | set(present))
    if filter_spec:
        pattern = re.compile(filter_spec)
        ids = [i for i in ids if pattern.match(i)]
    return ids


def _sha256(path: Path) -> str:
    return hash_untrusted_file(path)[0]


def _scored_sha256(row: TaskRow) -> str | None:
    sub = row.details.submission
    return sub.sha256_scored or sub.sha256


def row_sources(run: Path) -> dict[str, Path]:
    """``iid -> submission`` of every ProgramBench row, where the run model says it is
    (:func:`~benchmarks.programbench.kept_files.kept_files`): this run's folder, the
    ancestor that scored a carried row, or the shard that ran a merged run's row. A file in
    another root counts only when its sha256 is the one its row recorded."""
    from benchmarks.programbench.kept_files import effective_rows, kept_files

    try:
        rows = effective_rows(run)
    except (LedgerError, OSError):
        return {}
    roots = run_roots(run)
    out: dict[str, Path] = {}
    for row in rows:
        kept = kept_files(row, run, roots)
        src = kept.submission() if kept is not None else None
        if kept is None or src is None or src.is_symlink():
            continue
        if kept.root.resolve() != run.resolve() and (
                kept.expected_submission_sha256() != _sha256(src)):
            continue
        out[row.instance_id] = src
    return out


def export_run(run: Path, dest: Path, *, filter_spec: str | None = None) -> ExportManifest:
    """Build the tree; ``FileExistsError`` when ``dest`` exists, ``FileNotFoundError`` on no run."""
    run, dest = Path(run), Path(dest)
    if not (run / BENCHMARK).is_dir() and not (run / "run_manifest.json").exists():
        raise FileNotFoundError(f"{run} is not a run root (no {BENCHMARK}/ folder, no manifest)")
    ids = requested_ids(run, filter_spec)
    staging = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    if dest.exists():
        raise FileExistsError(f"{dest} exists: an export goes to a fresh folder")
    staging.mkdir(parents=True)
    copied: list[ExportedFile] = []
    missing: list[str] = []
    sources = row_sources(run)
    try:
        for iid in ids:
            src = sources.get(iid, run / BENCHMARK / iid / SUBMISSION)
            if not src.is_file() or src.stat().st_size == 0:
                missing.append(iid)
                continue
            target = staging / iid / SUBMISSION
            target.parent.mkdir()
            shutil.copyfile(src, target)
            copied.append(
                ExportedFile(
                    instance_id=iid, sha256=_sha256(target), size_bytes=target.stat().st_size,
                    source_run=str(src.parents[2].resolve())
                    if src.parents[2].resolve() != run.resolve() else None,
                )
            )
        manifest = ExportManifest(
            source_run=str(run.resolve()),
            dest_run=str(dest.resolve()),
            created_at_unix=time.time(),
            filter=filter_spec,
            requested=len(ids),
            copied=len(copied),
            missing_submission=len(missing),
            copied_ids=[f.instance_id for f in copied],
            missing_ids=missing,
            files=copied,
        )
        atomic_write_text(
            staging / "export_manifest.json",
            manifest.model_dump_json(by_alias=True, indent=2) + "\n",
        )
        order = ExportOrder(
            count=len(copied),
            shuffle=False,
            shuffle_seed=None,
            instance_ids=manifest.copied_ids,
            filter=filter_spec,
            exported_from=str(run.resolve()),
        )
        atomic_write_text(staging / "instance_order.json", order.model_dump_json(indent=2) + "\n")
        os.rename(staging, dest)  # fails if dest appeared meanwhile
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return manifest


def export_command(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="harness programbench export",
        description="Copy a run's non-empty submissions into a fresh programbench-eval tree.",
    )
    parser.add_argument("run", type=Path, help="run root")
    parser.add_argument("--output", type=Path, required=True, help="new folder (must not exist)")
    parser.add_argument("--filter", dest="filter_spec", help="regex on instance ids (re.match)")
    try:
        args = parser.parse_args(None if argv is None else list(argv))
    except SystemExit as exc:
        return 0 if exc.code == 0 else 2
    try:
        manifest = export_run(args.run, args.output, filter_spec=args.filter_spec)
    except (OSError, re.error) as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 2
    print(
        f"exported {manifest.copied} of {manifest.requested} submissions to {args.output} "
        f"({manifest.missing_submission} without a submission)"
    )
    for line in changed_shards(args.run):  # a merged root's shard that changed: not read
        print(f"warning: {line}; its submissions were not exported", file=sys.stderr)
    print(f"evaluate with: programbench eval {args.output}")
    return 0
