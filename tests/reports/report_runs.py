"""Run roots written by hand for the report tests (and the report benchmark in tests/perf).

``write_run`` writes ``run_manifest.json``, ``result_index.jsonl`` and one folder per
instance through ``harness.core.models`` and ``harness.core.fsutil.append_line``; ``big_run_rows``
gives the ledger of a large, varied run (10,000 rows for the size and paging checks).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from harness.core.fsutil import append_line, atomic_write_json
from harness.core.models import GitState, Manifest, Outcome, Selection, TaskRow, Versions

REPO = Path(__file__).resolve().parents[2]  # the checkout the manifest says it ran in
T0 = 1_790_000_000.0
SHM = Path("/dev/shm")
BULK_ROWS = 100


def manifest_for(root: Path, run_id: str, keys: list[str], **extra: Any) -> Manifest:
    benchmarks = sorted({k.split("/")[0] for k in keys}) or ["programbench"]
    fields: dict[str, Any] = {
        "run_id": run_id,
        "run_root": str(root),
        "created_at_unix": T0,
        "created_at": "2026-09-21T10:13:20+00:00",
        "argv": ["pytest", "benchmarks/programbench", "-n", "4"],
        "cwd": str(REPO),
        "benchmarks": benchmarks,
        "benchmark_versions": {b: "1.2.5" for b in benchmarks},
        "versions": Versions(harness="0.1.0", python="3.11.7", pytest="9.2.0", platform="linux"),
        "source": GitState(available=True, head="0123456789abcdef", branch="main", dirty=False),
        "selection": Selection(
            resolved=True, instance_ids=keys, count=len(keys), source="collection"
        ),
        "workers": 4,
        "config_fingerprint": "sha256:00112233aabbccdd",
        "outcome": "completed",
        "exit_code": 0,
        "finished_at_unix": T0 + 3600,
    }
    fields.update(extra)
    return Manifest(**fields)


def row(key: str, run_id: str = "run-a", **fields: Any) -> TaskRow:
    """A ledger row for ``key`` ("benchmark/instance_id"); fields override the defaults."""
    benchmark, _, iid = key.partition("/")
    data: dict[str, Any] = {
        "ts_unix": T0 + 60,
        "run_id": run_id,
        "benchmark": benchmark,
        "instance_id": iid,
        "status": "completed",
        "outcome": Outcome.SCORED,
        "official_eval_status": "completed",
    }
    data.update(fields)
    return TaskRow(**data)


def write_run(
    root: Path,
    rows: list[TaskRow],
    selection: list[str] | None = None,
    *,
    files: bool = True,
    torn_tail: str | None = None,
    **manifest_fields: Any,
) -> Path:
    """Write the run root ``root`` (must not exist) from ``rows``; returns ``root``."""
    root.mkdir()
    keys = selection if selection is not None else list(dict.fromkeys(r.key for r in rows))
    run_id = rows[0].run_id if rows else root.name
    manifest = manifest_for(root, run_id, keys, **manifest_fields)
    atomic_write_json(root / "run_manifest.json", manifest)
    lines = [r.dump_line() for r in rows]
    if len(lines) <= BULK_ROWS:
        for line in lines:  # one fsynced append per row, as the runner does
            append_line(root / "result_index.jsonl", line)
    else:  # the same bytes in one write: 10,000 fsyncs would dominate the test
        (root / "result_index.jsonl").write_text("".join(f"{line}\n" for line in lines))
    if files:
        for r in rows:
            folder = root / r.benchmark / r.instance_id
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "agent.log").write_text(f"log of {r.instance_id}\n")
    if torn_tail is not None:
        with open(root / "result_index.jsonl", "a", encoding="utf-8") as fh:
            fh.write(torn_tail)  # no newline: a crash mid-append
    return root


def big_run_rows(n: int, run_id: str = "big") -> list[TaskRow]:
    """``n`` rows ``programbench/inst-00000``...: every 10th failed, every 25th infra_failed,
    the rest scored with a score of ``(i % 101) / 100``, known costs and durations."""
    rows = []
    for i in range(n):
        key = f"programbench/inst-{i:05d}"
        common: dict[str, Any] = {"duration_s": 60 + i % 3600, "worker": f"gw{i % 8}"}
        if i % 25 == 0:
            rows.append(
                row(key, run_id, status="infra_failed", outcome=Outcome.INFRA_FAILED,
                    infra=True, reason_code="docker_unavailable", **common)
            )
        elif i % 10 == 0:
            rows.append(
                row(key, run_id, status="failed", outcome=Outcome.AGENT_FAILED,
                    reason_code="agent_timeout", score=None,
                    error=f"TimeExceeded: wall clock after {i} steps", **common)
            )
        else:
            score = (i % 101) / 100
            rows.append(
                row(key, run_id, score=score, resolved=score >= 1.0, tests_passed=i % 101,
                    tests_total=100, cost_usd=round(0.01 * (i % 500), 2), cost_known=True,
                    **common)
            )
    return rows


@contextmanager
def scratch_tree(factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder for a run root with thousands of instance folders, removed afterwards.

    In memory (``/dev/shm``) where the machine has one with room to spare, else under the
    session's temp dir. On a virtual disk here, making 10,000 instance folders took 4-6 s
    and deleting them (pytest prunes old temp dirs at a later session's start) 2-5 s more;
    in tmpfs both take a fraction of a second.
    """
    if SHM.is_dir() and os.access(SHM, os.W_OK) and shutil.disk_usage(SHM).free > 1 << 30:
        path = Path(tempfile.mkdtemp(prefix="harness-report-", dir=SHM))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)
    else:
        yield factory.mktemp("big")
