"""Where the runner keeps its own state inside a run root (``<run_root>/.harness/``).

One definition for every process that looks there: the controller (its lock, workers' pid
files, collection maps), the stop file, and the sandbox sweeper (which judges a run alive by
its lock and leaves ``--keep-sandboxes`` runs alone). No import of pytest or docker.
"""

from __future__ import annotations

from pathlib import Path

# The run's ledger, one JSON row per settled instance (harness.run.ledger writes it).
LEDGER_NAME = "result_index.jsonl"

HARNESS_DIR = ".harness"


def state_dir(run_root: Path | str) -> Path:
    return Path(run_root) / HARNESS_DIR


def lock_path(run_root: Path | str) -> Path:
    return state_dir(run_root) / "run.lock"


def stop_file(run_root: Path | str) -> Path:
    return state_dir(run_root) / "stop"


def keep_marker(run_root: Path | str) -> Path:
    """Present when the run was started with ``--keep-sandboxes``."""
    return state_dir(run_root) / "keep-sandboxes"


def workers_dir(run_root: Path | str) -> Path:
    return state_dir(run_root) / "workers"


def collection_file(run_root: Path | str, worker_id: str) -> Path:
    return state_dir(run_root) / "collection" / f"{worker_id}.json"
