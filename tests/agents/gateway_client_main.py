"""A gateway client in its own process (for kill and signal tests).

    python gateway_client_main.py URL INSTANCE_DIR BODY_JSON_FILE

Runs ``gateway_run.run_task`` with a fast poll policy, prints ``ready <pid>`` once it is
waiting (the checkpoint exists), and the settled task as one JSON line at the end.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from pathlib import Path

from harness.agents.gateway.client import GatewayClient, PollPolicy
from harness.agents.gateway.run import run_task

POLICY = PollPolicy(
    interval_s=0.05,
    max_interval_s=0.2,
    request_timeout_s=2.0,
    error_budget_s=5.0,
    not_ready_budget_s=5.0,
    client_grace_s=5.0,
)


def _announce_when_waiting(checkpoint: Path) -> None:
    while not checkpoint.exists():
        time.sleep(0.02)
    print("ready", flush=True)


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    url, instance_dir, body_file = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    body = json.loads(body_file.read_text())
    checkpoint = instance_dir / "task_checkpoint.json"
    if not checkpoint.exists():
        threading.Thread(target=_announce_when_waiting, args=(checkpoint,), daemon=True).start()
    else:
        print("ready", flush=True)
    with GatewayClient(url, policy=POLICY) as client:
        run = run_task(client, body, instance_dir=instance_dir, adapter="programbench", timeout_s=60)
    print(
        json.dumps(
            {
                "task_id": run.task_id,
                "status": run.result.status,
                "reattached": run.reattached,
                "reason": run.decision.reason,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
