"""Worker activity (an image pull) reaches the controller's progress line."""

from __future__ import annotations

import io
from pathlib import Path

from harness.core import activity
from reports.progress import Progress


def test_a_pull_reported_by_a_worker_shows_in_the_progress_line(tmp_path: Path) -> None:
    activity.report(tmp_path, "gw1", "pb__x", "pulling repo:tag: 120/800 MiB, 3 layers")
    seen = activity.read_all(tmp_path)
    assert seen == {"gw1": "pb__x: pulling repo:tag: 120/800 MiB, 3 layers"}
    progress = Progress(4, io.StringIO(), is_tty=False, min_interval=0)
    progress.set_activity(seen)
    assert progress.line().endswith("| gw1 pb__x: pulling repo:tag: 120/800 MiB, 3 layers")
    activity.clear(tmp_path, "gw1")
    assert activity.read_all(tmp_path) == {}


def test_stale_activity_is_not_shown(tmp_path: Path) -> None:
    activity.report(tmp_path, "gw0", "pb__y", "pulling")
    assert activity.read_all(tmp_path, now=10**12) == {}
