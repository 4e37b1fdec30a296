"""Record and replay at the model gateway (issue 28): a 1,000-call recording's size on disk,
and what a replayed call costs against a direct call to the scripted server.

One instance's 1,000 chat calls, each like an agent's step: a ~2 KB system prompt, the
step's own user message and a ~1 KB tool output, answered by the scripted server with a
tool call and its usage. The recording goes through the gateway (``--model-record``) to the
scripted server. Then, in interleaved rounds, the same 1,000 calls

* **direct**: an HTTP client (kept-alive connection) straight to the scripted server;
* **replay**: the same client through the gateway's Unix socket, served from the records
  (strict order; a new session each round; the server is not contacted);

and the figure is the median over rounds of replay minus direct, per call, in ms (goal:
under 2 ms added per call). The gate is ``replay <= direct + 2 ms`` (a replay may well be
faster than the scripted server: it does less). Recording's own cost per call is printed
(not gated: it fsyncs each record once). The recording's size is gated as a ratio: its
bytes on disk over the bytes of the requests and responses it holds (goal <= 2).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from harness.model_proxy.prices import ModelPrices
from harness.model_proxy.server import GatewayServer
from harness.model_proxy.tape import TapeConfig, TapeSession
from harness.model_proxy.usage import InstanceMeter
from harness.testing.fake_model_server import start_fake_model_server
from tests.agents.model_scripts import step
from tests.model_proxy.support import client

CALLS = 1000
ROUNDS = int(os.environ.get("HARNESS_PERF_REPLAY_ROUNDS", "3"))
GOAL_ADDED_MS = 2.0
KEY = "sk-perf-replay-0123456789abcdef"
SYSTEM = ("You are a helpful assistant that can interact with a computer. " * 32)[:2000]
OUTPUT = ("drwxr-xr-x 2 agent agent 4096 Jan  1 00:00 src\n" * 24)[:1000]
PRICES = ModelPrices.model_validate(
    {"models": {"fake-model": {"input_per_mtok": 2.0, "output_per_mtok": 10.0}}}
)


def bodies() -> list[dict[str, Any]]:
    tool = {
        "type": "function",
        "function": {
            "name": "bash",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
    return [
        {
            "model": "fake-model",
            "tools": [tool],
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"step {i}: run the next command"},
                {"role": "tool", "tool_call_id": f"call_{i}", "content": OUTPUT},
            ],
        }
        for i in range(CALLS)
    ]


def per_call_ms(
    client: httpx.Client, calls: list[dict[str, Any]], sizes: list[int] | None = None
) -> float:
    started = time.perf_counter()
    for body in calls:
        resp = client.post("/chat/completions", json=body)
        assert resp.status_code == 200, resp.text[:300]
        if sizes is not None:
            sizes.append(len(resp.content))
    return (time.perf_counter() - started) * 1000 / len(calls)


def through_gateway(
    records: Path, mode: str, upstream: str, key: str, calls: list[dict[str, Any]]
) -> float:
    config = TapeConfig(mode, records)  # type: ignore[arg-type]
    config.prepare()
    tape = TapeSession(config, "perf", "i-1", records.parent / f"instance-{mode}")
    (records.parent / f"instance-{mode}").mkdir(exist_ok=True)
    gw = GatewayServer(upstream, key, InstanceMeter(PRICES), tape=tape).start()
    try:
        with client(gw) as c:
            c.get("/models")  # the connection made (and, in replay, a served GET)
            return per_call_ms(c, calls)
    finally:
        gw.close()
        tape.close()


def disk_bytes(root: Path) -> tuple[int, int, int]:
    """(bytes in files, bytes allocated, files) under ``root``."""
    files = [p for p in root.rglob("*") if p.is_file()]
    return (
        sum(p.stat().st_size for p in files),
        sum(p.stat().st_blocks * 512 for p in files),
        len(files),
    )


def test_replay_adds_under_2ms_per_call_and_a_1000_call_recording_is_measured(
    tmp_path: Path, perf_goal: Callable[..., bool]
) -> None:
    server = start_fake_model_server({"responses": [step("ls -la")], "loop": True})
    calls = bodies()
    records = tmp_path / "records"
    try:
        record_ms = through_gateway(records, "record", server.base_url, KEY, calls)
        assert server.requests == CALLS
        size, allocated, files = disk_bytes(records)
        with httpx.Client(base_url=server.base_url) as direct:
            direct.get("/models")
            answers: list[int] = []
            per_call_ms(direct, calls, answers)  # warm-up; the size of each answer
            pairs: list[tuple[float, float]] = []
            for _ in range(ROUNDS):
                d = per_call_ms(direct, calls)
                before = server.requests
                r = through_gateway(records, "replay", "http://127.0.0.1:9", "", calls)
                assert server.requests == before  # a replay never reaches the server
                pairs.append((d, r))
    finally:
        server.stop()
    direct_ms = statistics.median(d for d, _ in pairs)
    replay_ms = statistics.median(r for _, r in pairs)
    added = statistics.median(r - d for d, r in pairs)
    print(
        f"\n{CALLS}-call recording: {size / 1e6:.2f} MB in {files} files "
        f"({allocated / 1e6:.2f} MB allocated), {size / CALLS / 1024:.1f} KiB a call; "
        f"recording {record_ms:.2f} ms/call through the gateway; "
        f"direct {direct_ms:.3f} ms/call, replay {replay_ms:.3f} ms/call, "
        f"added {added:+.3f} ms/call (median of {ROUNDS} rounds)"
    )
    exchanged = sum(len(json.dumps(b).encode()) for b in calls) + sum(answers)
    print(
        f"the recording holds {exchanged / 1e6:.2f} MB of requests and responses: "
        f"{size / exchanged:.2f}x on disk"
    )
    perf_goal("replay_recording_bytes_vs_exchanged", size / exchanged, 2.0)
    perf_goal(
        "replay_ms_per_call_vs_direct_plus_2ms", replay_ms, direct_ms + GOAL_ADDED_MS, unit="ms"
    )
