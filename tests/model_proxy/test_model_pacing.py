"""Issue 45, the model pushes back: the gateway paces and retries so a 429 storm, a 5xx
burst or a slow trickle cost the agent latency, not an error; a stream that goes silent is
cut and counted; a call is billed once, for the answer that arrived. Against the FAKE
scripted model server (no Docker, a real HTTP upstream on loopback)."""

from __future__ import annotations

import multiprocessing
import socket
import threading
import time
from pathlib import Path

import httpx

from harness.model_proxy.pacing import Pacer, PacingPolicy, PacingTimeout, retry_after_s
from harness.model_proxy.prices import ModelPrices
from harness.model_proxy.server import GatewayServer
from harness.model_proxy.usage import InstanceMeter
from harness.testing.fake_model_server import start_fake_model_server
from tests.model_proxy.support import client

KEY = "sk-pacing-unit-0123456789"
PRICES = ModelPrices.model_validate({"models": {"fake/scripted": {"input_per_mtok": 1.0,
                                                                  "output_per_mtok": 4.0}}})
OK = {"content": "done", "usage": {"prompt_tokens": 1000, "completion_tokens": 100}}
ONE_CALL_USD = (1000 * 1.0 + 100 * 4.0) / 1e6


def fast(**given: float | int) -> PacingPolicy:
    """A policy whose own backoff is short (the provider's Retry-After still counts)."""
    return PacingPolicy(backoff_s=0.05, backoff_cap_s=0.2, retry_after_floor_s=0.01,
                        **given)  # type: ignore[arg-type]



def call(script: dict, policy: PacingPolicy, *, stream: bool = False,
         limit: float | None = None) -> tuple[httpx.Response, InstanceMeter, int]:
    upstream = start_fake_model_server(script)
    meter = InstanceMeter(PRICES, limit)
    gw = GatewayServer(upstream.base_url, KEY, meter, pacer=Pacer(policy)).start()
    try:
        with client(gw) as c:
            resp = c.post("/chat/completions", timeout=60, json={
                "model": "fake/scripted", "stream": stream,
                "messages": [{"role": "user", "content": "hi"}]})
            resp.read()
    finally:
        gw.close()
        upstream.stop()
    return resp, meter, upstream.requests


def test_a_429_storm_is_waited_out_and_billed_once() -> None:
    storm = [{"status": 429, "retry_after": "0.3"}] * 3
    started = time.monotonic()
    resp, meter, requests = call({"responses": [*storm, OK]}, fast())
    assert resp.status_code == 200 and resp.json()["choices"][0]["message"]["content"] == "done"
    assert time.monotonic() - started >= 0.9  # the provider's Retry-After, honoured
    state = meter.snapshot()
    assert (requests, state.rate_limited, state.retries, state.upstream_errors) == (4, 3, 3, 0)
    assert state.waited_s >= 0.9
    assert state.calls == 1 and abs(state.cost_usd - ONE_CALL_USD) < 1e-12  # billed once
    assert meter.trouble_record()["rate_limited"] == 3


def test_past_the_wait_ceiling_the_agent_gets_the_429() -> None:
    resp, meter, requests = call({"responses": [{"status": 429, "retry_after": "30"}, OK]},
                                 fast(wait_max_s=1.0))
    assert resp.status_code == 429 and requests == 1  # 30 s would pass the 1 s ceiling
    state = meter.snapshot()
    assert state.rate_limited == 1 and state.upstream_errors == 1 and state.calls == 0


def test_a_5xx_burst_is_retried_within_the_calls_budget() -> None:
    burst = [{"status": 500}, {"status": 503}]
    resp, meter, requests = call({"responses": [*burst, OK]}, fast(retries=2))
    assert resp.status_code == 200 and requests == 3
    assert meter.snapshot().retries == 2 and meter.snapshot().upstream_errors == 0
    resp, meter, requests = call({"responses": [*burst, OK]}, fast(retries=1))
    assert resp.status_code == 503 and requests == 2  # one retry, then the agent is told
    assert meter.snapshot().upstream_errors == 1


def test_the_run_wide_retry_budget_is_shared(tmp_path: Path) -> None:
    pacer = Pacer(fast(retries=5, retry_budget=3), tmp_path / "pacing")
    other = Pacer(pacer.policy, tmp_path / "pacing")  # another worker of the same run
    assert [pacer.take_retry(), other.take_retry(), pacer.take_retry()] == [True] * 3
    assert not other.take_retry() and not pacer.take_retry()


def test_a_silent_stream_is_cut_and_counted_and_a_trickle_is_not() -> None:
    stalled = {**OK, "stall_after_chunks": 1, "stall_s": 20}
    started = time.monotonic()
    resp, meter, _ = call({"responses": [stalled]}, fast(stream_idle_s=0.5),
                          stream=True)
    assert time.monotonic() - started < 10  # cut after 0.5 s of silence, not 20 s
    assert b"[DONE]" not in resp.content
    state = meter.snapshot()
    assert state.stalls == 1 and state.upstream_errors == 1
    trickle = {**OK, "trickle_s": 0.3}  # a chunk every 0.3 s: slow, never silent 0.5 s
    resp, meter, _ = call({"responses": [trickle]}, fast(stream_idle_s=0.5),
                          stream=True)
    assert b"[DONE]" in resp.content and meter.snapshot().stalls == 0
    assert abs(meter.snapshot().cost_usd - ONE_CALL_USD) < 1e-12


def test_retry_after_reads_seconds_and_dates() -> None:
    assert retry_after_s("2") == 2.0 and retry_after_s("0.5") == 0.5
    assert retry_after_s(None) is None and retry_after_s("soon") is None
    later = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 <= (retry_after_s(later) or 0) <= 31


def test_the_concurrency_cap_holds_across_gateways(tmp_path: Path) -> None:
    pacer = Pacer(PacingPolicy(concurrency=2), tmp_path / "pacing")
    inside, peak, lock = [0], [0], threading.Lock()

    def one() -> None:
        with pacer.slot(time.monotonic() + 30):
            with lock:
                inside[0] += 1
                peak[0] = max(peak[0], inside[0])
            time.sleep(0.2)
            with lock:
                inside[0] -= 1

    threads = [threading.Thread(target=one) for _ in range(6)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] == 2 and time.monotonic() - started >= 0.55  # 3 rounds of 0.2 s
    busy = Pacer(PacingPolicy(concurrency=1, wait_max_s=0.3), tmp_path / "busy")
    with busy.slot(time.monotonic() + 5):
        try:
            with busy.slot(time.monotonic() + 0.3):
                raise AssertionError("a second slot was given")
        except PacingTimeout:
            pass


def _turns(directory: str, n: int, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    pacer = Pacer(PacingPolicy(rpm=4, window_s=1.0), Path(directory))
    for _ in range(n):
        pacer.turn(time.monotonic() + 30)
        out.put(time.time())


def test_the_rpm_limit_holds_across_processes(tmp_path: Path) -> None:
    """Two worker processes of one run share its window: 4 calls per second in all."""
    out: multiprocessing.Queue = multiprocessing.get_context("spawn").Queue()  # type: ignore[type-arg]
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_turns, args=(str(tmp_path / "pacing"), 6, out))
             for _ in range(2)]
    for p in procs:
        p.start()
    stamps = sorted(out.get(timeout=60) for _ in range(12))
    for p in procs:
        p.join(30)
    for i in range(len(stamps) - 4):
        assert stamps[i + 4] - stamps[i] >= 0.99, stamps  # never 5 within a second
    assert stamps[-1] - stamps[0] >= 1.99  # 12 turns at 4 a second: at least 2 s


def test_a_connection_never_made_is_retried_within_the_calls_retries(tmp_path: Path) -> None:
    """Found by the attack review: a refused connection used to be retried until the run's
    whole budget was spent by one call."""
    spare = socket.socket()
    spare.bind(("127.0.0.1", 0))
    port = spare.getsockname()[1]
    spare.close()  # nothing listens there: every connection is refused
    meter = InstanceMeter(PRICES, None)
    pacer = Pacer(fast(retries=2, retry_budget=50), tmp_path / "pacing")
    gw = GatewayServer(f"http://127.0.0.1:{port}/v1", KEY, meter, pacer=pacer).start()
    try:
        with client(gw) as c:
            resp = c.post("/chat/completions", timeout=60, json={"model": "fake/scripted"})
    finally:
        gw.close()
    assert resp.status_code == 502
    assert meter.snapshot().retries == 2  # the call's own 2, not the run's 50
    assert Pacer(pacer.policy, tmp_path / "pacing").take_retry()  # the budget is left


def test_a_response_cut_after_the_request_is_not_sent_again() -> None:
    """A provider that took the request and dropped the connection may have generated (and
    billed) an answer: the call is not sent again."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    seen: list[int] = []

    def drop() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            seen.append(1)
            conn.recv(65536)
            conn.close()  # the request read, no answer

    threading.Thread(target=drop, daemon=True).start()
    meter = InstanceMeter(PRICES, None)
    url = f"http://127.0.0.1:{server.getsockname()[1]}/v1"
    gw = GatewayServer(url, KEY, meter, pacer=Pacer(fast(retries=3))).start()
    try:
        with client(gw) as c:
            resp = c.post("/chat/completions", timeout=60, json={"model": "fake/scripted"})
    finally:
        gw.close()
        server.close()
    assert resp.status_code == 502 and len(seen) == 1 and meter.snapshot().retries == 0


def test_a_retry_after_of_zero_still_waits() -> None:
    pacer = Pacer(PacingPolicy(retry_after_floor_s=0.5))
    for told in ("0", "-5", "nan", "0.01"):
        assert pacer.backoff(0, told) == 0.5
    assert pacer.backoff(0, "2") == 2.0


def test_a_recorded_call_keeps_its_latency_and_its_pushback_on_the_tape(tmp_path: Path) -> None:
    """Issue 46: the viewer shows each model call's latency and its 429s and retries; the
    tape keeps them beside the call (the instance's totals stay on its meter)."""
    from harness.model_proxy.tape import TapeConfig, TapeIndex, TapeSession, index_path

    config = TapeConfig("record", tmp_path / "records", "strict")
    config.prepare()
    (tmp_path / "out").mkdir()
    tape = TapeSession(config, "bench", "t-1", tmp_path / "out")
    upstream = start_fake_model_server({"responses": [
        {"status": 429, "retry_after": "0.2"}, {"status": 503}, OK]})
    meter = InstanceMeter(PRICES, None)
    gw = GatewayServer(upstream.base_url, KEY, meter, pacer=Pacer(fast()), tape=tape).start()
    try:
        with client(gw) as c:
            resp = c.post("/chat/completions", timeout=60, json={
                "model": "fake/scripted", "messages": [{"role": "user", "content": "hi"}]})
    finally:
        gw.close()
        tape.close()
        upstream.stop()
    assert resp.status_code == 200
    [call] = TapeIndex.model_validate_json(
        index_path(tmp_path / "records", "bench", "t-1").read_bytes()).calls
    assert call.trouble is not None
    # one 429 waited out, then sent again twice (after the 429, after the 503)
    assert (call.trouble["rate_limited"], call.trouble["retries"]) == (1, 2)
    assert call.latency_s is not None and call.latency_s >= 0.2  # the 429's wait included
    assert call.trouble["waited_s"] >= 0.2
    totals = meter.trouble_record()  # the one call's share is the instance's whole
    assert {k: totals[k] for k in call.trouble} == call.trouble
