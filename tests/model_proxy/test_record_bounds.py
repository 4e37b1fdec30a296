"""Bounds on ``--model-record`` (issue 40, class 5), at the gateway itself (no Docker).

Before: 10 calls the upstream rejected, costing $0.00 under a $0.05 limit, wrote 301 MiB of
records; and a request body nested about 300 levels deep was answered but never recorded
(the serializer's depth limit), so an agent could keep chosen exchanges off the tape. Now an
instance's recording has a budget of calls and bytes (the next call past it is refused with
402 ``record_budget_reached``, never served unrecorded), and an exchange that cannot be
stored whole is kept as a stub (its key, its body's sha256, its status) that a replay never
serves.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from harness.core.errors import RefusalError
from harness.model_proxy.tape import (
    RECORD_BUDGET_CODE,
    TapeConfig,
    TapeIndex,
    TapeSession,
    index_path,
    read_record,
)
from harness.runner.agent_choice import _record_budget
from harness.testing.fake_model_server import FakeModelServer
from tests.model_proxy.support import client
from tests.model_proxy.test_record_gateway import KEY, MSGS, gateway

BIG = "x" * (4 << 20)  # a 4 MiB message: what a flooding agent sends


def _tape(tmp_path: Path, mode: str, **budget: int) -> TapeSession:
    config = TapeConfig(mode, tmp_path / "records", **budget)  # type: ignore[arg-type]
    config.prepare()
    return TapeSession(config, "bench", "t-1", tmp_path / "runs" / mode)


def _records_bytes(tmp_path: Path) -> int:
    return sum(p.stat().st_size for p in (tmp_path / "records").rglob("*") if p.is_file())


def test_a_record_flood_stops_at_the_instances_budget(
        tmp_path: Path, upstream: FakeModelServer) -> None:
    (tmp_path / "runs" / "record").mkdir(parents=True)
    tape = _tape(tmp_path, "record", max_bytes=16 << 20, max_calls=1000)
    gw = gateway(upstream.base_url, KEY, tape, limit=0.05)
    statuses = []
    try:
        with client(gw) as c:
            for _ in range(10):
                body = {"model": "priced", "messages": [{"role": "user", "content": BIG}]}
                statuses.append(c.post("/chat/completions", json=body, timeout=60))
    finally:
        gw.close()
        tape.close()
    served = [r for r in statuses if r.status_code == 200]
    refused = [r for r in statuses if r.status_code == 402]
    assert len(served) == 4 and len(refused) == 6  # 4 x 4 MiB reach the 16 MiB budget
    assert all(RECORD_BUDGET_CODE in r.text for r in refused)
    assert upstream.requests == 4  # a refused call never reached the upstream either
    written = _records_bytes(tmp_path)
    assert written < (16 << 20) + (5 << 20), written  # the budget and one call at most
    summary = tape.summary()
    assert (summary["calls"], summary["refused_over_budget"]) == (4, 6)
    index = TapeIndex.model_validate_json(
        index_path(tmp_path / "records", "bench", "t-1").read_bytes())
    assert len(index.calls) == 4  # every served call is on the tape


def test_the_budget_covers_every_route_get_models_too(
        tmp_path: Path, upstream: FakeModelServer) -> None:
    (tmp_path / "runs" / "record").mkdir(parents=True)
    tape = _tape(tmp_path, "record", max_calls=2)
    gw = gateway(upstream.base_url, KEY, tape)
    try:
        with client(gw) as c:
            got = [c.get("/models").status_code for _ in range(3)]
            got.append(c.post("/chat/completions", json={"model": "priced", "messages": MSGS},
                              timeout=60).status_code)
    finally:
        gw.close()
        tape.close()
    assert got == [200, 200, 402, 402]
    assert (tape.summary()["calls"], tape.summary()["refused_over_budget"]) == (2, 2)


def _one_call(upstream_url: str, tape: TapeSession, body: dict) -> httpx.Response:
    """One call through a gateway on ``tape``; the gateway and the tape closed after it."""
    gw = gateway(upstream_url, KEY, tape)
    try:
        with client(gw) as c:
            return c.post("/chat/completions", json=body, timeout=60)
    finally:
        gw.close()
        tape.close()


def _deep(levels: int) -> dict:
    root: dict = {}
    cur = root
    for _ in range(levels):
        cur["a"] = {}
        cur = cur["a"]
    return root


def test_an_unrecordable_exchange_is_a_stub_and_never_replayed(
        tmp_path: Path, upstream: FakeModelServer) -> None:
    (tmp_path / "runs" / "record").mkdir(parents=True)
    (tmp_path / "runs" / "replay").mkdir(parents=True)
    body = {"model": "priced", "messages": MSGS, "metadata": _deep(300)}
    tape = _tape(tmp_path, "record")
    answered = _one_call(upstream.base_url, tape, body)
    assert answered.status_code == 200
    index = TapeIndex.model_validate_json(
        index_path(tmp_path / "records", "bench", "t-1").read_bytes())
    (call,) = index.calls  # the exchange is on the tape, not silently lost
    record = read_record(tmp_path / "records", call.record)
    assert record.unrecordable is not None and "depth" in record.unrecordable
    assert len(record.request.body["body_sha256"]) == 64 and record.response.status == 200
    assert tape.summary()["unrecordable"] == 1
    again = _one_call("http://127.0.0.1:9", _tape(tmp_path, "replay"), body)
    assert again.status_code == 409 and "was not recordable" in again.text


@pytest.mark.parametrize(("given", "want"), [(None, (2000, 64 << 20)), ("10,1000", (10, 1000))])
def test_the_budget_option(given: str | None, want: tuple[int, int]) -> None:
    assert _record_budget(given, lambda m: RefusalError(m, stage="agent", reason="agent_options")) == want


@pytest.mark.parametrize("bad", ["10", "0,5", "a,b", "1,2,3", "-1,4"])
def test_a_bad_budget_is_refused_in_one_line(bad: str) -> None:
    with pytest.raises(RefusalError, match=r"--model-record-budget .*CALLS,BYTES"):
        _record_budget(bad, lambda m: RefusalError(m, stage="agent", reason="agent_options"))

