"""What the ProgramBench scenarios share: a run killed mid-way, the rows and eval.json files
of a chain of run roots (a run and its resumes), and the official score of each row."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Any

from benchmarks.programbench.official_eval import score_eval_json
from tests.support.suite import FORK_SERVER, REPO_ROOT, Run, run_env, wait_for

TARGET = "benchmarks/programbench"


def ledger_rows(root: Path) -> list[dict[str, Any]]:
    """Every row of a run root's ledger, in order (superseded ones too)."""
    return Run(0, "", root).rows


def run_killed_after_first_row(root: Path, *args: str, timeout: float = 600) -> list[str]:
    """Start ``pytest benchmarks/programbench --run-root ROOT ARGS`` (a fork of the tests'
    warm pytest server, leading its own session); SIGKILL its whole process group as soon
    as the first instance's row is in the ledger (the next instance is then under way).
    Returns the ids whose rows the ledger holds after the kill."""
    argv = ["-p", "no:cacheprovider", "-q", TARGET, "--run-root", str(root), *args]
    env = run_env()
    log = root.parent / f"{root.name}.killed-run.txt"
    proc = FORK_SERVER.spawn("pytest", argv, REPO_ROOT, env, log)
    ledger = root / "result_index.jsonl"
    try:
        wait_for(lambda: ledger.is_file() and ledger.read_bytes().count(b"\n") >= 1,
                 timeout=timeout, interval=0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return [row["instance_id"] for row in ledger_rows(root)]


def run_id(root: Path) -> str:
    return str(json.loads((root / "run_manifest.json").read_text())["run_id"])


def origin_root(row: dict[str, Any], roots: list[Path]) -> Path:
    """The run root whose evaluation produced ``row``'s score (the ancestor that scored a
    carried row, else the row's own run)."""
    wanted = row.get("carried_from") or row["run_id"]
    by_id = {run_id(r): r for r in roots}
    return by_id[wanted]


def official_score(row: dict[str, Any], roots: list[Path]) -> tuple[float, Path]:
    """The official score of the eval.json that ``programbench eval`` wrote for ``row``
    (read with the package's own model, as ``programbench info`` reads it), and its path."""
    iid = row["instance_id"]
    path = origin_root(row, roots) / row["output_paths"]["eval_json"]
    result = score_eval_json(iid, path)
    assert result.score is not None, f"{path}: no official score ({result.error_code})"
    return result.score, path


def labelled_containers(root: Path) -> list[str]:
    """Containers (any state) that carry a run root's label."""
    import docker

    found = docker.from_env().containers.list(
        all=True, filters={"label": f"harness.run_root={root.absolute()}"})
    return [c.name for c in found]
