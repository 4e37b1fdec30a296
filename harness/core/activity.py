"""What a worker is doing right now, for the controller's live view (image pulls, builds).

Workers cannot talk to the controller mid-test (xdist forwards reports only when an item
ends), so each writes one small JSON file, ``<run_root>/.harness/activity/<worker>.json``
(atomically, at most once a second), and the controller polls the folder. Pure file I/O: no
pytest, no docker.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from harness.core.fsutil import atomic_write_text
from harness.core.layout import state_dir

STALE_S = 30.0


def activity_dir(run_root: Path | str) -> Path:
    return state_dir(run_root) / "activity"


def report(run_root: Path | str, worker: str, key: str, text: str) -> None:
    folder = activity_dir(run_root)
    folder.mkdir(parents=True, exist_ok=True)
    payload = {"worker": worker, "key": key, "text": text, "t": time.time()}
    atomic_write_text(folder / f"{worker}.json", json.dumps(payload) + "\n")


def clear(run_root: Path | str, worker: str) -> None:
    (activity_dir(run_root) / f"{worker}.json").unlink(missing_ok=True)


def read_all(run_root: Path | str, now: float | None = None) -> dict[str, str]:
    """worker -> "key: text" of every fresh activity file (older than STALE_S is ignored)."""
    now = time.time() if now is None else now
    out: dict[str, str] = {}
    folder = activity_dir(run_root)
    if not folder.is_dir():
        return out
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if now - float(data.get("t", 0)) <= STALE_S:
            out[str(data.get("worker"))] = f"{data.get('key')}: {data.get('text')}"
    return out
