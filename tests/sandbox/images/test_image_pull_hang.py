"""Issue 45, infrastructure that hangs: a pull from a registry that accepts the connection
and never answers (real Docker, a real listener on loopback as ``--image-mirror``). The
pull phase's deadline ends the instance as infrastructure, ``phase_timeout: pull``; no
container of the run is left, the budget hold is released, the manifest records the
deadlines, and the run goes on to its end (the worker slot is free)."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import docker
import pytest

from benchmarks.programbench import FIXTURE_ID
from tests.support.suite import run_pytest

pytestmark = pytest.mark.docker


def test_a_pull_that_never_answers_ends_at_its_deadline(tmp_path: Path) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])  # accepted, never answered
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    mirror = f"127.0.0.1:{server.getsockname()[1]}"
    campaign = tmp_path / "campaign.json"
    started = time.monotonic()
    try:
        run = run_pytest("benchmarks/programbench", tmp_path / "run", "--pb-fixtures", "-k",
                         "calculator", "--agent", "oracle", "--image-mirror", mirror,
                         "--pull", "always", "--phase-timeout", "pull=4", "--retry-infra", "0",
                         "--campaign-file", str(campaign), "--campaign-budget-usd", "5",
                         "--per-task-reserve-usd", "1", "--unknown-cost-allowance-usd", "1",
                         timeout=300)
    finally:
        stop.set()
        server.close()
        for conn in held:
            conn.close()
    took = time.monotonic() - started
    row = run.latest[FIXTURE_ID]
    assert row["outcome"] == "infra_failed" and row["reason_code"] == "phase_timeout", row
    assert "phase_timeout: pull (past its deadline of 4 s" in row["error"]
    assert took < 120, took  # the deadline, not the engine's own patience
    assert run.manifest["extra"]["phase_deadlines"]["pull"] == 4.0
    assert run.manifest["extra"]["phase_deadlines"]["eval"] == 7200.0
    left = docker.from_env().containers.list(
        all=True, filters={"label": f"harness.run={run.manifest['run_id']}"})
    assert left == []
    state = json.loads(campaign.read_text())
    assert state["outstanding_usd"] == pytest.approx(0.0, abs=1e-12)  # the hold released
