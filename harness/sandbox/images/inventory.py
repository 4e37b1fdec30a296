"""Which images this harness brought onto the engine, and when each was last used.

* Built images carry the ``harness.recipe`` label (:mod:`harness.sandbox.images.build`).
* Pulled images cannot be labelled: every pull or use by :func:`harness.sandbox.images.pull.
  resolve_image` is recorded in ``$HARNESS_CACHE_DIR/images.json`` (default
  ``~/.cache/harness``), under a file lock: image ID -> references, first pull, last use.

``harness images list`` shows both; ``harness images prune --unused-for DAYS`` removes only
these images, only when unused for that long and not used by any container. Images that
neither carry the label nor are recorded are never touched.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from filelock import FileLock
from pydantic import BaseModel, ConfigDict, Field

from harness.core.cache import cache_root
from harness.core.fsutil import atomic_write_text
from harness.sandbox import labels as L


class PulledImage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    refs: list[str] = Field(default_factory=list)
    first_pulled_unix: float
    last_used_unix: float


class Inventory(BaseModel):
    """``images.json``: the images this harness pulled (image ID -> record)."""

    model_config = ConfigDict(extra="forbid")

    schema_: str = Field(default="harness.images.v1", alias="schema")
    pulled: dict[str, PulledImage] = Field(default_factory=dict)


def inventory_path() -> Path:
    return cache_root() / "images.json"


def _load(path: Path) -> Inventory:
    try:
        return Inventory.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return Inventory()


def record_use(image_id: str, refs: Sequence[str], *, pulled: bool) -> None:
    """Note that ``image_id`` was pulled (or used again) under ``refs``."""
    path = inventory_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    now = time.time()
    with FileLock(str(path) + ".lock"):
        inv = _load(path)
        entry = inv.pulled.get(image_id)
        if entry is None:
            if not pulled:
                return  # a local image we did not bring: not ours to prune later
            entry = PulledImage(first_pulled_unix=now, last_used_unix=now)
            inv.pulled[image_id] = entry
        entry.last_used_unix = now
        entry.refs = sorted(set(entry.refs) | set(refs))
        atomic_write_text(path, inv.model_dump_json(indent=2, by_alias=True) + "\n")


def owned_images(client: Any) -> list[dict[str, Any]]:
    """Every image on the engine that this harness built or pulled, with its provenance."""
    inv = _load(inventory_path())
    out: list[dict[str, Any]] = []
    for img in client.api.images():
        image_id = str(img["Id"])
        labels = img.get("Labels") or {}
        rec = inv.pulled.get(image_id)
        if L.RECIPE in labels:
            kind, last = "built", float(img.get("Created") or 0)
        elif rec is not None:
            kind, last = "pulled", rec.last_used_unix
        else:
            continue
        out.append({"id": image_id, "kind": kind, "tags": img.get("RepoTags") or [],
                    "size_bytes": int(img.get("Size") or 0), "last_used_unix": last})
    return out


def _in_use(client: Any) -> set[str]:
    return {str(c.get("ImageID")) for c in client.api.containers(all=True)}


def images_command(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="harness images",
        description="List or prune the images this harness built or pulled (never others).")
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("list", help="list the harness's images")
    prune = sub.add_parser("prune", help="remove the harness's images unused for DAYS")
    prune.add_argument("--unused-for", type=float, required=True, metavar="DAYS")
    prune.add_argument("--dry-run", action="store_true", help="only say what would go")
    prune.add_argument("--kind", choices=("all", "pulled", "built"), default="all",
                       help="only images the harness pulled, or built (default: both)")
    args = parser.parse_args(argv)
    from harness.sandbox.client import get_client
    from harness.sandbox.errors import SandboxError

    try:
        client = get_client(timeout=60)
    except SandboxError as exc:
        print(f"harness images: {exc}", file=sys.stderr)
        return 1
    images = owned_images(client)
    if args.action == "list":
        for img in sorted(images, key=lambda i: i["last_used_unix"]):
            age = (time.time() - img["last_used_unix"]) / 86400
            tags = ", ".join(img["tags"]) or "<untagged>"
            print(f"{img['id'][7:19]}  {img['kind']:<6}  {img['size_bytes'] / 2**20:8.0f} MiB  "
                  f"unused {age:5.1f} d  {tags}")
        print(json.dumps({"images": len(images),
                          "bytes": sum(i["size_bytes"] for i in images)}))
        return 0
    if args.unused_for < 0:
        print("harness images prune: --unused-for must be >= 0 days", file=sys.stderr)
        return 2
    cutoff = time.time() - args.unused_for * 86400
    busy = _in_use(client)
    removed, failed = 0, 0
    for img in images:
        if img["last_used_unix"] > cutoff or img["id"] in busy:
            continue
        if args.kind != "all" and img["kind"] != args.kind:
            continue
        print(f"{'would remove' if args.dry_run else 'removing'} {img['id'][7:19]} "
              f"{', '.join(img['tags']) or '<untagged>'}")
        if args.dry_run:
            continue
        try:
            client.api.remove_image(img["id"], force=True)
            removed += 1
        except Exception as exc:  # docker.errors.APIError: keep going, report
            failed += 1
            print(f"  failed: {exc}", file=sys.stderr)
    print(json.dumps({"removed": removed, "failed": failed}))
    return 1 if failed else 0
