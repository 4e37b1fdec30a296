"""One run of the stress test, as a separate OS process (``python stress_worker.py ARGS``).

It opens (or creates: all processes race) the campaign, admits its run, and runs its
instances in two threads that stand in for xdist workers: reserve, "work", settle with
a random cost, then add that cost to the fake meter's usage file (so the test meter
reports exactly the settled costs, after the fact, like a lagging provider). It prints
one JSON document: every instance's terminal outcome and what each settlement saw, and
how long each admission (``reserve``) took.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

from filelock import UnixFileLock

from harness.budget import BudgetRefused, Campaign


def add_usage(usage_file: Path, cost: float) -> None:
    with UnixFileLock(str(usage_file) + ".lock", timeout=30):
        data = json.loads(usage_file.read_text())
        data["usage"] += cost
        tmp = usage_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, usage_file)


def main() -> int:
    args = json.loads(sys.argv[1])
    campaign = Campaign.open_or_create(
        args["campaign"],
        ceiling_usd=args["ceiling"],
        key_fingerprint=args["fingerprint"],
        baseline_usage=args["baseline"],
    )
    run_id = args["run_id"]
    campaign.admit_run(run_id, args["run_root"], os.getpid())
    usage_file = Path(args["usage_file"])
    outcomes: dict[str, dict[str, Any]] = {}
    latencies: list[float] = []
    lock = threading.Lock()
    began = time.time()

    def worker(index: int) -> None:
        rng = random.Random(f"{run_id}-{index}")
        for i in range(index, args["instances"], args["workers"]):
            key = f"stress/{run_id}-{i:03d}"
            started = time.perf_counter()
            try:
                campaign.reserve(run_id, key, args["reserve"])
            except BudgetRefused as exc:
                with lock:
                    latencies.append(time.perf_counter() - started)
                    outcomes[key] = {"outcome": "refused", "reason": exc.reason}
                continue
            with lock:
                latencies.append(time.perf_counter() - started)
            time.sleep(rng.uniform(0, 0.004))
            # Multiples of 1/128: sums are exact in binary floating point.
            cost = rng.randint(13, 128) / 128
            settlement = campaign.settle(run_id, key, cost, True)
            add_usage(usage_file, cost)
            with lock:
                outcomes[key] = {
                    "outcome": "settled",
                    "cost": cost,
                    "spent": settlement.campaign_spent_usd,
                    "outstanding": settlement.campaign_outstanding_usd,
                    "overran": settlement.overran,
                }

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(args["workers"])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ended = time.time()
    record = campaign.finish_run(run_id, "completed")
    print(json.dumps({"outcomes": outcomes, "record": record.model_dump(),
                      "latencies": latencies, "began": began, "ended": ended}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
