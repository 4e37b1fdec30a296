"""``monitor.json`` in the run root: what an operator watches while a run goes."""

from __future__ import annotations

import os
from pathlib import Path

from harness.core.fsutil import atomic_write_json, read_json

from .models import Monitor

MONITOR_FILE = "monitor.json"


def write_monitor(run_root: str | os.PathLike[str], monitor: Monitor) -> Path:
    """Atomically replace ``<run_root>/monitor.json``; returns its path."""
    path = Path(run_root) / MONITOR_FILE
    atomic_write_json(path, monitor)
    return path


def read_monitor(run_root: str | os.PathLike[str]) -> Monitor:
    return Monitor.model_validate(read_json(Path(run_root) / MONITOR_FILE))
