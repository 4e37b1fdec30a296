"""What a Cowork resume must share with every ancestor, and what leaves a run unreportable.

A resume is refused (one line naming every differing field, exit 2) when an ancestor that
ran (not a dry run) used another

* runtime image (agent and eval containers) or PostgreSQL sidecar image, the harness's own
  default images included: each run records the IDs it admitted
  (``extra.cowork.run_images``); an older ancestor without that record is read from its
  rows' ``details.cowork_bench.runtime_image``/``pg_image``. ``--allow-image-change`` waives
  an image change (recorded; the run is then not reportable);
* harness commit (``source.head`` of the manifests): a verdict depends on the harness's
  adapter as much as on the checkout; check the ancestor's commit out, or start afresh.

:func:`differences` is pure (the manifests and rows are given); :func:`check_ancestors`
reads them from the ancestors' run roots.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from benchmarks.cowork_bench import BENCHMARK
from harness.api import Manifest, RefusalError, TaskRow

ROLES = {"runtime": "runtime image", "pg": "PostgreSQL image"}
ROW_FIELDS = {"runtime": "runtime_image", "pg": "pg_image"}
IMAGE_WAIVER = "--allow-image-change"


@dataclass(frozen=True)
class Difference:
    field: str  # "runtime image", "PostgreSQL image", "harness commit"
    ancestor: str
    was: str
    now: str
    waivable: bool

    def text(self) -> str:
        return f"{self.field} {self.was} in {self.ancestor}, {self.now} now"


def run_images(manifest: Manifest, rows: Iterable[TaskRow]) -> dict[str, set[str]]:
    """role -> the image IDs a run used: its admission record, else its rows'."""
    record = (manifest.extra.section("cowork") or {}).get("run_images") or {}
    out: dict[str, set[str]] = {role: set() for role in ROLES}
    for role in ROLES:
        if isinstance(record.get(role), str):
            out[role].add(record[role])
    if not any(out.values()):
        for row in rows:
            own = row.details.section(BENCHMARK) or {}
            for role, name in ROW_FIELDS.items():
                value = own.get(name)
                if isinstance(value, str) and value:
                    out[role].add(value)
    return out


def differences(
    current: Manifest,
    now_images: Mapping[str, str],
    ancestors: Iterable[tuple[str, Manifest, Iterable[TaskRow]]],
) -> list[Difference]:
    """Every field in which this run differs from an ancestor that ran."""
    out: list[Difference] = []
    head = current.source.head
    for root, manifest, rows in ancestors:
        if manifest.dry_run:  # prepared only: no image ran, no verdict was made
            continue
        old_head = manifest.source.head
        if old_head != head:
            out.append(
                Difference(
                    "harness commit", root, old_head or "unknown", head or "unknown", waivable=False
                )
            )
        used = run_images(manifest, rows)
        for role, label in ROLES.items():
            now = now_images.get(role)
            for old in sorted(used[role]):
                if now is not None and old != now:
                    out.append(Difference(label, root, old, now, waivable=True))
    return out


def check_ancestors(
    benchmark: str,
    current: Manifest,
    ancestors: list[str],
    now: Mapping[str, str],
    *,
    allow_image_change: bool,
) -> list[Difference]:
    """Refuse (:class:`RefusalError`, stage ``resume``) a resume whose ancestors ran other
    images or another harness commit; return the image changes the waiver let through."""
    from harness.api import ledger_path, read_ledger, read_manifest

    found = []
    for root in ancestors:
        rows = [
            r
            for r in read_ledger(ledger_path(Path(root))).latest.values()
            if r.benchmark == benchmark
        ]
        found.append((str(root), read_manifest(Path(root)), rows))
    diffs = differences(current, now, found)
    blocking = [d for d in diffs if not (d.waivable and allow_image_change)]
    if blocking:
        raise RefusalError(
            refusal_text(str(ancestors[0]), blocking),
            stage="resume",
            reason="cowork_resume_mismatch",
        )
    return diffs


def refusal_text(first_root: str, found: list[Difference]) -> str:
    fields = sorted({d.field for d in found})
    fixes = []
    if any(d.field == "harness commit" for d in found):
        fixes.append("check out the harness commit the run used")
    if any(d.waivable for d in found):
        fixes.append(
            f"rebuild or pass the images it ran, or waive an image change with "
            f"{IMAGE_WAIVER} (recorded, not reportable)"
        )
    return (
        f"--resume-from {first_root}: cowork resume differs in {', '.join(fields)} "
        f"({'; '.join(d.text() for d in found)}); {'; or '.join(fixes)}, or start a "
        f"fresh run"
    )


def waiver_reasons(
    allow_dirty: bool,
    allow_mismatch: bool,
    allow_missing_tools: bool,
    dirty: bool | None,
    commit_matches: bool | None,
    allow_missing_db: bool = False,
) -> list[str]:
    """Why a run's figures are not reportable because of a Cowork waiver it was given."""
    out = []
    if allow_dirty:
        state = "dirty" if dirty else "clean" if dirty is False else "state unknown"
        out.append(f"cowork waiver --cowork-allow-dirty-bench (checkout {state})")
    if allow_mismatch:
        state = (
            "at the pinned commit"
            if commit_matches
            else "not at the pinned commit"
            if commit_matches is False
            else "commit unknown"
        )
        out.append(f"cowork waiver --cowork-allow-bench-commit-mismatch (checkout {state})")
    if allow_missing_tools:
        out.append("cowork waiver --cowork-allow-missing-tools (a task may run without its MCP servers)")
    if allow_missing_db:
        out.append(
            "cowork waiver --cowork-allow-missing-db (the database may start without the checkout's dump)"
        )
    return out
