"""A gateway task's copied events as evidence, planted by an adversary (no Docker).

The orphan cancel on resume (:func:`harness.agents.gateway.orphans.paid_evidence`) and a
row's paid evidence (:func:`harness.agents.gateway.orphans.record_paid_evidence`) read
``gateway_events.jsonl`` from agent folders, ancestors' included, which an agent's files sit
beside. A link to someone else's file, a file past the writer's 16 MiB cap and a FIFO must
prove nothing, and never hang or crash the reader.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from harness.agents.gateway.checkpoint import EVENTS_NAME, AgentFolder
from harness.agents.gateway.events import MAX_EVENTS_BYTES, read_events
from harness.agents.gateway.orphans import paid_evidence, record_paid_evidence
from harness.core.adapter import BenchmarkAdapter, InstanceSpec
from harness.core.models import Plan
from harness.runner.instance import InstanceContext, RunContext

T = TypeVar("T")
USAGE = json.dumps({"type": "llm_usage", "prompt_tokens": 7, "completion_tokens": 3}) + "\n"


class _Bench(BenchmarkAdapter):
    name = "bench"


def _context(root: Path) -> InstanceContext:
    plan = Plan(run_id=root.name, created_at_unix=time.time())
    run = RunContext(run_id=root.name, run_root=root, worker_id="main", role="single",
                     plan=plan, adapters={})
    return InstanceContext(run, _Bench(), InstanceSpec(instance_id="i"), "t[i]")


def _plant(folder: Path, kind: str, tmp_path: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    events = folder / EVENTS_NAME
    if kind == "symlink":
        elsewhere = tmp_path / "someone_elses_usage.jsonl"
        elsewhere.write_text(USAGE)
        os.symlink(elsewhere, events)
    elif kind == "oversized":
        line = USAGE.encode()
        with events.open("wb") as fh:
            fh.write(line * (MAX_EVENTS_BYTES // len(line) + 2))
    else:
        os.mkfifo(events)
    return events


def _bounded(call: Callable[[], T], events: Path) -> T:
    """``call()`` in a thread that must end within 10 s (a FIFO opened for reading blocks)."""
    box: list[T] = []
    thread = threading.Thread(target=lambda: box.append(call()), daemon=True)
    thread.start()
    thread.join(10)
    if thread.is_alive():
        with open(events, "w"):  # a writer comes and goes: the blocked reader ends
            pass
        pytest.fail(f"reading {events} blocked")
    return box[0]


@pytest.mark.parametrize("kind", ["symlink", "oversized", "fifo"])
def test_a_planted_events_file_in_an_ancestor_folder_proves_nothing(
        tmp_path: Path, kind: str) -> None:
    events = _plant(tmp_path / "r1" / "bench" / "i", kind, tmp_path)
    assert _bounded(lambda: read_events(events), events) == []
    evidence = _bounded(lambda: paid_evidence(events), events)
    assert evidence["paid_activity"] == "unknown" and "prompt_tokens" not in evidence
    assert ("events" in evidence) is (kind == "oversized")  # named only if a regular file


@pytest.mark.parametrize("kind", ["symlink", "oversized", "fifo"])
def test_a_planted_events_file_gives_a_row_no_paid_evidence(tmp_path: Path, kind: str) -> None:
    ctx = _context(tmp_path / "r2")
    events = _plant(ctx.instance_dir, kind, tmp_path)
    _bounded(lambda: record_paid_evidence(AgentFolder.of(ctx.instance_dir, None),
                                          ctx.result.details, ctx.output), events)
    assert "paid_evidence" not in ctx.result.details
    # kept as an output only when it is a regular file of the instance's own folder
    assert ("gateway_events" in ctx.result.output_paths) is (kind == "oversized")


def test_a_regular_events_file_under_the_cap_still_proves_spend(tmp_path: Path) -> None:
    events = tmp_path / "r1" / "bench" / "i" / EVENTS_NAME
    events.parent.mkdir(parents=True)
    events.write_text(USAGE + '{"type": "llm_usage", "prompt_tok')  # a torn last line
    assert paid_evidence(events) == {"paid_activity": "observed", "prompt_tokens": 7,
                                     "completion_tokens": 3, "events": str(events)}
