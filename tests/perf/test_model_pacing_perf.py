"""The model gateway under a rate-limited, misbehaving provider (issue 45), against the
FAKE scripted model server on loopback.

* **Throughput under an rpm limit**: four instances (each its own gateway, one pacer for
  the run, as four workers' gateways share the run's) make 15 calls each against a limit of
  20 calls per (scaled) 1 s window. The ideal: the first 20 go as fast as the instances can
  make them (measured in the same run: 20 calls, no limit), then 20 a window, so the
  other 40 take 2 windows more. The figure is the measured time over the ideal (goal <=
  1.15): what the pacing wastes beyond the limit itself.
* **Money under pushback**: the same four instances against a provider that answers one
  call in four with 429 (Retry-After 0.05 s) and one in six with a 500: every call is
  answered in the end, and the meters' cost and tokens are exactly the answered calls'
  (a retried call is billed once); asserted, not a ratio.
* **The per-task limit under pushback**: an instance with a limit of 3.5 calls' worth stops
  at its fourth answered call, whatever the retries (asserted).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from harness.model_proxy.pacing import Pacer, PacingPolicy
from harness.model_proxy.prices import ModelPrices
from harness.model_proxy.server import GatewayServer
from harness.model_proxy.usage import InstanceMeter
from harness.testing.fake_model_server import start_fake_model_server
from tests.model_proxy.support import client

PRICES = ModelPrices.model_validate({"models": {"fake/scripted": {"input_per_mtok": 1.0,
                                                                  "output_per_mtok": 4.0}}})
OK = {"content": "ok", "usage": {"prompt_tokens": 500, "completion_tokens": 50}}
PER_CALL = (500 * 1.0 + 50 * 4.0) / 1e6
INSTANCES, CALLS, RPM, WINDOW = 4, 15, 20, 1.0
THROUGHPUT_GOAL = 1.15


def instances(upstream_url: str, pacer: Pacer, calls: int,
              limit: float | None = None) -> tuple[list[InstanceMeter], list[list[int]]]:
    """Run ``INSTANCES`` gateways in threads, each making ``calls`` calls; their meters and
    the status codes each instance's agent saw."""
    meters = [InstanceMeter(PRICES, limit) for _ in range(INSTANCES)]
    seen: list[list[int]] = [[] for _ in range(INSTANCES)]

    def agent(i: int) -> None:
        gw = GatewayServer(upstream_url, "sk-perf", meters[i], pacer=pacer).start()
        try:
            with client(gw) as c:
                for _ in range(calls):
                    resp = c.post("/chat/completions", timeout=120, json={
                        "model": "fake/scripted", "messages": [{"role": "user", "content": "x"}]})
                    seen[i].append(resp.status_code)
        finally:
            gw.close()

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(INSTANCES)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return meters, seen


def test_throughput_under_an_rpm_limit_against_the_ideal(
        tmp_path: Path, perf_goal: Callable[..., bool]) -> None:
    upstream = start_fake_model_server({"responses": [OK], "loop": True})
    try:
        started = time.monotonic()  # the baseline: the first window's calls, unpaced
        instances(upstream.base_url, Pacer(PacingPolicy(), tmp_path / "free"),
                  RPM // INSTANCES)
        burst = time.monotonic() - started
        pacer = Pacer(PacingPolicy(rpm=RPM, window_s=WINDOW), tmp_path / "pacing")
        started = time.monotonic()
        meters, seen = instances(upstream.base_url, pacer, CALLS)
        elapsed = time.monotonic() - started
    finally:
        upstream.stop()
    assert all(code == 200 for codes in seen for code in codes)
    total = INSTANCES * CALLS
    ideal = (total - RPM) / RPM * WINDOW + burst
    ratio = elapsed / ideal
    print(f"\n{total} calls under {RPM} per {WINDOW:g} s: {elapsed:.2f} s, ideal {ideal:.2f} s, "
          f"ratio {ratio:.3f}")
    assert elapsed >= (total - RPM) / RPM * WINDOW  # never faster than the limit allows
    perf_goal("model_rpm_throughput_vs_ideal", ratio, THROUGHPUT_GOAL)
    assert sum(m.snapshot().calls for m in meters) == total


def test_money_stays_exact_under_429s_and_5xx(tmp_path: Path) -> None:
    script = [OK, {"status": 429, "retry_after": "0.05"}, OK, {"status": 500}, OK, OK,
              {"status": 429, "retry_after": "0.05"}, OK, {"status": 503}, OK, OK, OK]
    upstream = start_fake_model_server({"responses": script, "loop": True})
    try:
        pacer = Pacer(PacingPolicy(backoff_s=0.02, backoff_cap_s=0.1, retries=5,
                                   retry_after_floor_s=0.01), tmp_path / "pacing")
        meters, seen = instances(upstream.base_url, pacer, CALLS)
        sent = upstream.requests
    finally:
        upstream.stop()
    assert all(code == 200 for codes in seen for code in codes)  # latency, not errors
    states = [m.snapshot() for m in meters]
    answered = INSTANCES * CALLS
    assert sum(s.calls for s in states) == answered and sent > answered
    assert sum(s.prompt_tokens for s in states) == 500 * answered
    assert sum(s.completion_tokens for s in states) == 50 * answered
    assert abs(sum(s.cost_usd for s in states) - answered * PER_CALL) < 1e-12
    assert sum(s.rate_limited for s in states) + sum(s.retries for s in states) > 0
    assert sum(s.retries for s in states) == sent - answered  # each extra request: a retry


def test_the_per_task_limit_holds_under_pushback(tmp_path: Path) -> None:
    script = [{"status": 429, "retry_after": "0.02"}, OK, {"status": 500}, OK]
    upstream = start_fake_model_server({"responses": script, "loop": True})
    try:
        pacer = Pacer(PacingPolicy(backoff_s=0.02, backoff_cap_s=0.05, retry_after_floor_s=0.01),
                      tmp_path / "pacing")
        meters, seen = instances(upstream.base_url, pacer, 8, limit=3.5 * PER_CALL)
    finally:
        upstream.stop()
    for meter, codes in zip(meters, seen, strict=True):
        state = meter.snapshot()
        assert state.calls == 4 and state.limit_reached  # the 4th crosses, then refusals
        assert codes[:4] == [200] * 4 and set(codes[4:]) == {402}
        assert abs(state.cost_usd - 4 * PER_CALL) < 1e-12
