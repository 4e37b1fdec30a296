"""Eight OS processes, two workers each, fifty instances each, one campaign, one ceiling,
on each store (a file, and PostgreSQL: ``campaign_where``).

A controller-side meter supervisor polls a fake usage file the workers feed with their
settled costs, so reservations, settlements and meter readings all contend for the lock.
The admissions' latency and rate are printed (``-s``) for the README's figures.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

from harness.budget import Campaign, MeterSupervisor, read_monitor
from harness.testing.fake_meter import FakeFileMeter
from tests.budget.budget_support import BASELINE, FINGERPRINT
from tests.support.suite import FORK_SERVER
from tests.support.suite import REPO_ROOT as REPO

PROCESSES = 8
WORKERS = 2
INSTANCES = 50
CEILING = 60.0  # ~400 instances averaging ~$0.56 would cost ~$225: the ceiling binds
RESERVE = 1.0  # every cost is <= the reservation


def test_ceiling_holds_across_processes_and_spend_equals_settled_costs(
    tmp_path: Path, campaign_where: Path | str
) -> None:
    campaign_file = campaign_where
    usage_file = tmp_path / "fake-usage.json"
    usage_file.write_text(json.dumps({"usage": BASELINE}))

    # The parent plays a controller watching the campaign through the fake meter.
    observer_root = tmp_path / "observer"
    observer_root.mkdir()
    meter = FakeFileMeter(usage_file)
    campaign = Campaign.open_or_create(
        campaign_file, ceiling_usd=CEILING, key_fingerprint=FINGERPRINT, baseline_usage=BASELINE
    )
    campaign.admit_run("observer", observer_root, os.getpid())
    supervisor = MeterSupervisor(
        campaign, "observer", observer_root, meter,
        blindness_sec=10, poll_sec=0.05, retry_sec=0.05, read_timeout_sec=1,
    )  # fmt: skip
    supervisor.start(tick_sec=0.05)

    procs = []
    for p in range(PROCESSES):
        args = {
            "campaign": str(campaign_file),
            "ceiling": CEILING,
            "fingerprint": FINGERPRINT,
            "baseline": BASELINE,
            "run_id": f"run{p}",
            "run_root": str(tmp_path / f"run{p}"),
            "usage_file": str(usage_file),
            "instances": INSTANCES,
            "workers": WORKERS,
            "reserve": RESERVE,
        }
        # Processes of their own, forked from the tests' warm server (tests.support.forkrun)
        # rather than eight interpreter start-ups.
        procs.append(FORK_SERVER.spawn("tests.budget.stress_worker", [json.dumps(args)], REPO,
                                       dict(os.environ), tmp_path / f"worker{p}.out"))
    results = []
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out
        results.append(json.loads(out.strip().splitlines()[-1]))
    final = supervisor.finish("completed", 0)

    settled_costs: list[float] = []
    for p, result in enumerate(results):
        outcomes = result["outcomes"]
        # Every instance has exactly one terminal outcome.
        assert sorted(outcomes) == [f"stress/run{p}-{i:03d}" for i in range(INSTANCES)]
        for outcome in outcomes.values():
            if outcome["outcome"] == "settled":
                # The ceiling is never exceeded, counting what is still reserved.
                assert outcome["spent"] + outcome["outstanding"] <= CEILING + 1e-9
                assert not outcome["overran"]
                settled_costs.append(outcome["cost"])
            else:
                assert outcome == {"outcome": "refused", "reason": "campaign_budget"}
        record = result["record"]
        settled_here = [o for o in outcomes.values() if o["outcome"] == "settled"]
        assert record["settled_count"] == len(settled_here)
        assert record["refused_count"] == INSTANCES - len(settled_here)
        assert record["abandoned_count"] == 0

    state = campaign.snapshot()
    total = sum(settled_costs)
    # The sum of settled costs equals the campaign's recorded spend (and the meter's).
    assert state.settled_usd == total
    assert state.last_usage - state.usage_baseline == total
    assert state.spent_usd == total
    assert state.spent_usd <= CEILING and state.outstanding_usd == 0
    # The ceiling did bind: many instances were refused, and most of the budget was used.
    assert len(settled_costs) < PROCESSES * INSTANCES / 2
    assert total > CEILING * 0.75
    assert state.active_runs == {} and len(state.runs) == PROCESSES + 1

    latencies = sorted(x for result in results for x in result["latencies"])
    span = max(r["ended"] for r in results) - min(r["began"] for r in results)
    print(f"{campaign.backend.kind}: {len(latencies)} admissions by {PROCESSES} processes "
          f"({PROCESSES * WORKERS} threads) in {span:.2f}s: {len(latencies) / span:.0f}/s; "
          f"latency p50 {statistics.median(latencies) * 1000:.1f} ms, "
          f"p95 {latencies[int(0.95 * len(latencies))] * 1000:.1f} ms")

    # The controller's monitor.json shows the final spend.
    assert final.finished and final.campaign_settlement == "recorded"
    monitor = read_monitor(observer_root)
    assert monitor.campaign_spent_usd == total and monitor.meter.last_usage == state.last_usage
