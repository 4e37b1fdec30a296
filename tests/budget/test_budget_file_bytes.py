"""The campaign file is byte-identical across the store refactor (issue 27, point 2).

A fixed sequence of campaign operations (creation, a meter added, custody, reservations,
settlements, a refusal, a stop, readings, a takeover, a reconcile, run ends) is played on a
campaign file with the clock, the process identity and liveness pinned; the file's bytes
after every step must equal those the file store wrote before PostgreSQL was added
(``data/file_store_golden.json``, recorded from that code).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.budget import BudgetRefused, Campaign, MeterReading, custody

GOLDEN = Path(__file__).with_name("data") / "file_store_golden.json"


@pytest.fixture
def pinned(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    ticks = iter(range(1_700_000_000, 1_700_100_000))
    monkeypatch.setattr(time, "time", lambda: float(next(ticks)) + 0.25)
    monkeypatch.setattr(os, "getpid", lambda: 4242)
    dead: dict[str, str] = {}
    ident = custody.ProcessIdentity("golden-host", "boot-1", 0, 777)

    def identify(pid: int) -> custody.ProcessIdentity:
        return custody.ProcessIdentity(ident.host, ident.boot_id, pid, ident.start_ticks)

    monkeypatch.setattr(custody, "identify", identify)
    monkeypatch.setattr(
        custody, "liveness", lambda entry: "dead" if entry.run_id in dead else "alive"
    )
    yield dead


def _reading(usage: float) -> MeterReading:
    now = time.time()
    return MeterReading(usage=usage, requested_at_unix=now, observed_at_unix=now, source="g")


def play(path: Path, dead: dict[str, str]) -> list[str]:
    """Every step's file text, in order."""
    out: list[str] = []

    def step() -> None:
        out.append(path.read_text(encoding="utf-8"))

    campaign = Campaign.open_or_create(
        path, ceiling_usd=20.0, key_fingerprint="none", baseline_usage=0.0, prior_spend_usd=1.5
    )
    step()
    campaign.admit_run("pre", "/runs/pre", 100, unknown_cost_allowance_usd=0.5)
    campaign.reserve("pre", "b/p0", 0.5)
    campaign.settle("pre", "b/p0", None, False)
    campaign.finish_run("pre", "completed")
    step()
    campaign = Campaign.open_or_create(
        path, ceiling_usd=20.0, key_fingerprint="sha256:aa", baseline_usage=3.0
    )  # a meter is added
    step()
    campaign.admit_run("r1", "/runs/r1", 101)
    step()
    campaign.reserve("r1", "b/a", 2.0, budget_reserve_usd=1.0)
    step()
    campaign.reserve("r1", "b/b", 2.0, run_budget_usd=10.0)
    campaign.settle("r1", "b/a", 1.25, True)
    step()
    campaign.settle("r1", "b/b", 3.0, True)  # an overrun
    campaign.reserve("r1", "b/c", 1.0)
    campaign.release("r1", "b/c")
    step()
    with pytest.raises(BudgetRefused):
        campaign.reserve("r1", "b/huge", 50.0)
    step()
    assert campaign.record_reading(_reading(4.5))
    assert not campaign.record_reading(_reading(4.0))
    step()
    campaign.admit_run("r2", "/runs/r2", 102, unknown_cost_allowance_usd=0.75)
    campaign.reserve("r2", "b/x", 1.0)
    campaign.reserve("r2", "b/y", 0.0)
    dead["r2"] = "killed"
    step()
    campaign.admit_run("r3", "/runs/r3", 103, resumes=["/runs/r2"])
    step()
    campaign.reserve("r3", "b/x", 0.5)
    campaign.settle("r3", "b/x", 0.25, True, reattached=True)
    campaign.reserve("r3", "b/z", 0.0)
    campaign.request_stop("r3", "budget_meter_unavailable")
    with pytest.raises(BudgetRefused):
        campaign.reserve("r3", "b/w", 0.0)
    step()
    campaign.finish_run("r3", "stopped", _reading(6.0), meter_error="blind")
    step()
    campaign.reserve("r1", "b/d", 1.0)
    dead["r1"] = "killed"
    campaign.reconcile_run("r1", 6.5)
    step()
    return out


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_the_campaign_file_is_byte_identical(tmp_path: Path, pinned: dict[str, str]) -> None:
    steps = play(tmp_path / "campaign.json", pinned)
    if os.environ.get("HARNESS_RECORD_GOLDEN"):  # how the golden file was made
        GOLDEN.write_text(
            json.dumps({"steps": [_digest(s) for s in steps], "final": steps[-1]}, indent=2) + "\n"
        )
    golden = json.loads(GOLDEN.read_text())
    assert steps[-1] == golden["final"]
    assert [_digest(s) for s in steps] == golden["steps"]
