"""Issue 28 at the gateway itself (no Docker): every exchange recorded (plain and streamed,
OpenAI and Anthropic, GET models) and replayed byte for byte with no upstream; the key rule
(volatile fields ignored, answer-changing ones not); strict misses (409 ``replay_miss``
naming the instance and the call) and ``sequence`` divergences; secrets scrubbed from every
record; a replay's cost $0 while a per-task limit still counts what the recording spent."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.model_proxy import tape as tape_module
from harness.model_proxy.prices import ModelPrices
from harness.model_proxy.server import GatewayServer
from harness.model_proxy.tape import (
    REDACTED,
    REPORT_NAME,
    ReplayReport,
    TapeConfig,
    TapeIndex,
    TapeRecord,
    TapeSession,
    first_difference,
    index_path,
    read_index,
    request_key,
)
from harness.model_proxy.usage import InstanceMeter
from harness.testing.fake_model_server import FakeModelServer
from tests.model_proxy.support import client

KEY = "sk-record-unit-0123456789abcdef"
PRICES = ModelPrices.model_validate(
    {"models": {"priced": {"input_per_mtok": 1.0, "output_per_mtok": 4.0}}}
)
PER_CALL = (300 * 1.0 + 20 * 4.0) / 1e6
MSGS = [{"role": "user", "content": "solve it"}]


def session(tmp_path: Path, mode: str, order: str = "strict", instance: str = "t-1") -> TapeSession:
    config = TapeConfig(mode, tmp_path / "records", order)  # type: ignore[arg-type]
    config.prepare()
    out = tmp_path / "runs" / mode / instance
    out.mkdir(parents=True, exist_ok=True)
    return TapeSession(config, "bench", instance, out)


def report_of(tape: TapeSession) -> ReplayReport:
    assert tape.instance_dir is not None
    return ReplayReport.model_validate_json((tape.instance_dir / REPORT_NAME).read_bytes())


def gateway(
    upstream_url: str, key: str, tape: TapeSession | None, limit: float | None = None
) -> GatewayServer:
    return GatewayServer(upstream_url, key, InstanceMeter(PRICES, limit), tape=tape).start()


Exchange = tuple[int, str, bytes]


def calls(c: httpx.Client, extra: dict[str, Any] | None = None) -> list[Exchange]:
    """One of each kind of call; (status, content type, the exact bytes received)."""
    extra = extra or {}
    out: list[Exchange] = []
    bodies: list[tuple[str, dict[str, Any]]] = [
        ("/chat/completions", {"model": "priced", "messages": MSGS, **extra}),
        ("/chat/completions", {"model": "priced", "messages": MSGS, "stream": True, **extra}),
        (
            "/chat/completions",
            {
                "model": "priced",
                "messages": MSGS,
                "stream": True,
                "stream_options": {"include_usage": True},
                **extra,
            },
        ),
        ("/messages", {"model": "priced", "messages": MSGS, "max_tokens": 10, **extra}),
        (
            "/messages",
            {"model": "priced", "messages": MSGS, "max_tokens": 10, "stream": True, **extra},
        ),
    ]
    for path, body in bodies:
        with c.stream("POST", path, json=body) as resp:
            out.append((resp.status_code, resp.headers["content-type"], resp.read()))
    models = c.get("/models")
    out.append((models.status_code, models.headers["content-type"], models.content))
    return out


def record_run(
    tmp_path: Path, upstream: FakeModelServer, extra: dict[str, Any] | None = None
) -> tuple[list[Exchange], GatewayServer]:
    tape = session(tmp_path, "record")
    gw = gateway(upstream.base_url, KEY, tape)
    try:
        with client(gw) as c:
            seen = calls(c, extra)
    finally:
        gw.close()
        tape.close()
    return seen, gw


def test_every_exchange_is_recorded_and_replayed_byte_for_byte_without_an_upstream(
    tmp_path: Path, upstream: FakeModelServer
) -> None:
    recorded, rec_gw = record_run(tmp_path, upstream)
    assert upstream.requests == 5  # GET models is not counted by the fake
    index = TapeIndex.model_validate_json(
        index_path(tmp_path / "records", "bench", "t-1").read_bytes()
    )
    assert [c.position for c in index.calls] == [1, 2, 3, 4, 5, 6]
    assert [(c.route, c.stream) for c in index.calls] == [
        ("chat/completions", False),
        ("chat/completions", True),
        ("chat/completions", True),
        ("messages", False),
        ("messages", True),
        ("models", False),
    ]
    records = [
        TapeRecord.model_validate_json(p.read_bytes())
        for p in sorted((tmp_path / "records" / "records").rglob("*.json"))
    ]
    assert len(records) == 6
    streamed = next(r for r in records if r.request.body and r.request.body.get("stream_options"))
    assert streamed.response.events and streamed.response.events[-1] == "data: [DONE]"
    assert json.loads(streamed.response.events[-2][6:])["choices"] == []  # the usage chunk
    assert streamed.cost_usd == pytest.approx(PER_CALL) and streamed.cost_source == "prices"
    rec_state = rec_gw.meter.snapshot()
    upstream.stop()  # nothing answers any more

    tape = session(tmp_path, "replay")
    gw = gateway("http://127.0.0.1:9", "", tape)
    assert gw._client is None  # a replay has no HTTP client at all
    try:
        with client(gw) as c:
            replayed = calls(c)
    finally:
        gw.close()
        tape.close()
    assert replayed == recorded  # status, content type and every byte, streams included
    plain_stream = replayed[1][2]
    assert b'"choices": []' not in plain_stream  # the usage chunk the client did not ask for
    assert b'"choices": []' in replayed[2][2]
    state = gw.meter.snapshot()
    assert state.calls == rec_state.calls == 5
    assert state.prompt_tokens == rec_state.prompt_tokens == 1500
    assert state.cost_usd == 0.0 and state.cost_known  # nothing was paid
    report = report_of(tape)
    assert (report.calls, len(report.served), report.misses, report.divergences) == (6, 6, [], [])
    assert report.original_cost_usd == pytest.approx(5 * PER_CALL)
    assert [s.recorded_position for s in report.served] == [1, 2, 3, 4, 5, 6]


def test_the_key_ignores_volatile_fields_and_nothing_else() -> None:
    base = {"model": "m", "messages": MSGS, "tools": [{"type": "function"}], "temperature": 0}
    key = request_key("POST", "chat/completions", base)
    same = {
        **base,
        "user": "u-1",
        "metadata": {"run": 2},
        "stream_options": {"x": 1},
        "request_id": "r-9",
        "store": True,
        "service_tier": "flex",
    }
    assert request_key("POST", "chat/completions", dict(reversed(list(same.items())))) == key
    for changed in (
        {**base, "temperature": 0.5},
        {**base, "model": "m2"},
        {**base, "messages": [{"role": "user", "content": "solve it!"}]},
        {**base, "tools": []},
        {**base, "stream": True},
        {**base, "seed": 1},
    ):
        assert request_key("POST", "chat/completions", changed) != key
    assert request_key("POST", "responses", base) != key
    assert (
        first_difference({"messages": [{"content": "abc"}]}, {"messages": [{"content": "abd"}]})
        == "messages[0].content: character 2: 'abc' where the record has 'abd'"
    )


def test_strict_replay_misses_a_changed_request_with_409_naming_instance_and_call(
    tmp_path: Path, upstream: FakeModelServer
) -> None:
    record_run(tmp_path, upstream)
    before = upstream.requests
    tape = session(tmp_path, "replay")
    gw = gateway("http://127.0.0.1:9", "", tape)
    try:
        with client(gw) as c:
            ok = c.post(
                "/chat/completions",
                json={"model": "priced", "messages": MSGS, "user": "someone-else"},
            )
            miss = c.post(
                "/chat/completions",
                json={"model": "priced", "messages": [{"role": "user", "content": "solve it."}]},
            )
    finally:
        gw.close()
        tape.close()
    assert ok.status_code == 200
    assert miss.status_code == 409 and miss.headers["x-should-retry"] == "false"
    error = miss.json()["error"]
    assert error["code"] == "replay_miss"
    assert "call 2 of instance bench/t-1" in error["message"]
    assert upstream.requests == before  # never contacted
    report = report_of(tape)
    assert [m.position for m in report.misses] == [2]
    # against the call recorded at position 2 (keys in sorted order: messages come first)
    assert report.misses[0].first_difference == (
        "messages[0].content: character 8: 'solve it.' where the record has 'solve it'"
    )
    assert tape.summary()["misses"] == 1
    assert report.missed_calls == 1


def test_an_agent_calling_on_after_misses_cannot_grow_the_report(
    tmp_path: Path, upstream: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past MAX_REPORT_MISSES a miss is counted, not listed (nor compared with a record)."""
    monkeypatch.setattr(tape_module, "MAX_REPORT_MISSES", 3)
    record_run(tmp_path, upstream)
    tape = session(tmp_path, "replay")
    for i in range(10):
        found = tape.replay("POST", "chat/completions", {"model": "priced", "n": i}, False)
        assert isinstance(found, tape_module.Missed) and tape.missed
    tape.close()
    report = report_of(tape)
    assert [m.position for m in report.misses] == [1, 2, 3]
    assert report.missed_calls == 10 and tape.summary()["misses"] == 10


def test_sequence_order_serves_recorded_calls_in_order_and_keeps_every_divergence(
    tmp_path: Path, upstream: FakeModelServer
) -> None:
    recorded, _ = record_run(tmp_path, upstream)
    tape = session(tmp_path, "replay", order="sequence")
    gw = gateway("http://127.0.0.1:9", "", tape)
    try:
        with client(gw) as c:
            replayed = calls(c, {"temperature": 0.7})  # every call now differs
            extra = c.post("/chat/completions", json={"model": "priced", "messages": MSGS})
    finally:
        gw.close()
        tape.close()
    assert replayed == recorded  # served in recorded order all the same
    assert extra.status_code == 409  # past the last record
    report = report_of(tape)
    assert [d.position for d in report.divergences] == [1, 2, 3, 4, 5]  # GET models: no body
    assert report.divergences[0].first_difference == "temperature: not in the record"
    assert [m.position for m in report.misses] == [7]
    summary = tape.summary()
    assert summary["divergences"] == 5 and len(summary["first_divergences"]) == 5


class _Echo(BaseHTTPRequestHandler):
    """An upstream that leaks the key it is sent into its answers (plain and streamed)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        auth = self.headers.get("Authorization", "")
        if body.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.close_connection = True
            self.wfile.write(f'data: {{"echo": "{auth}", "choices": [{{}}]}}\n\n'.encode())
            self.wfile.write(b"data: [DONE]\n\n")
            return
        data = json.dumps(
            {
                "error": {"message": f"Incorrect API key provided: {auth}"},
                "usage": {"prompt_tokens": 1, "completion_tokens": 1},
            }
        ).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_the_key_is_in_no_record_even_when_the_upstream_echoes_it(tmp_path: Path) -> None:
    echo = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=echo.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{echo.server_address[1]}/v1"
    tape = session(tmp_path, "record")
    gw = gateway(url, KEY, tape)
    try:
        with client(gw) as c:
            leaked = c.post(
                "/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": f"my key is {KEY}"}]},
            )
            with c.stream(
                "POST", "/chat/completions", json={"model": "m", "messages": MSGS, "stream": True}
            ) as resp:
                streamed = resp.read()
    finally:
        gw.close()
        tape.close()
        echo.shutdown()
        echo.server_close()
    assert KEY in leaked.text and KEY.encode() in streamed  # the agent saw what was sent
    hits = [
        p
        for p in (tmp_path / "records").rglob("*")
        if p.is_file() and KEY.encode() in p.read_bytes()
    ]
    assert hits == []
    records = [
        TapeRecord.model_validate_json(p.read_bytes())
        for p in (tmp_path / "records" / "records").rglob("*.json")
    ]
    assert sorted(r.redacted for r in records) == [1, 2]  # prompt + error; one stream event
    assert all(REDACTED in r.model_dump_json() for r in records)


def test_a_replay_costs_nothing_but_the_limit_counts_what_the_recording_spent(
    tmp_path: Path, upstream: FakeModelServer
) -> None:
    tape = session(tmp_path, "record")
    gw = gateway(upstream.base_url, KEY, tape, limit=2.5 * PER_CALL)
    bodies = [
        {"model": "priced", "messages": [{"role": "user", "content": str(i)}]} for i in range(4)
    ]
    try:
        with client(gw) as c:
            recorded = [c.post("/chat/completions", json=b).status_code for b in bodies]
    finally:
        gw.close()
        tape.close()
    assert recorded == [200, 200, 200, 402]  # the third crossed the limit
    replay = session(tmp_path, "replay")
    gw = gateway("http://127.0.0.1:9", "", replay, limit=2.5 * PER_CALL)
    try:
        with client(gw) as c:
            replayed = [c.post("/chat/completions", json=b).status_code for b in bodies]
    finally:
        gw.close()
        replay.close()
    assert replayed == recorded
    state = gw.meter.snapshot()
    assert state.cost_usd == 0.0 and state.limit_reached and state.refused == 1
    assert replay.summary()["original_cost_usd"] == pytest.approx(3 * PER_CALL)


def test_a_dead_recording_is_replayed_from_its_journal(
    tmp_path: Path, upstream: FakeModelServer
) -> None:
    tape = session(tmp_path, "record")
    gw = gateway(upstream.base_url, KEY, tape)
    try:
        with client(gw) as c:
            first = c.post("/chat/completions", json={"model": "priced", "messages": MSGS})
    finally:
        gw.close()  # the session is never closed: no index, the journal stays
    index = read_index(tmp_path / "records", "bench", "t-1")
    assert index is not None and not index.complete and len(index.calls) == 1
    replay = session(tmp_path, "replay")
    gw = gateway("http://127.0.0.1:9", "", replay)
    try:
        with client(gw) as c:
            again = c.post("/chat/completions", json={"model": "priced", "messages": MSGS})
    finally:
        gw.close()
        replay.close()
    assert again.content == first.content
    assert replay.summary()["recording_complete"] is False


def test_a_records_directory_is_checked_before_a_replay(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a records directory"):
        TapeConfig("replay", tmp_path / "nothing").prepare()
    TapeConfig("record", tmp_path / "rec").prepare()
    TapeConfig("replay", tmp_path / "rec").prepare()  # what a recording left is accepted


def test_an_agent_whose_calls_cannot_be_taped_is_refused_by_its_own_word(tmp_path: Path) -> None:
    """The runner asks the agent (Agent.tape_problem) and refuses with its one line."""
    from harness.agents.base import AgentOptions, make_agent
    from harness.runner.agent_choice import build_agent

    assert make_agent("nop", AgentOptions()).tape_problem("record") is None  # the default
    replay = TapeConfig("replay", tmp_path / "records")
    with pytest.raises(ValueError, match="makes its model calls outside the harness"):
        build_agent("nop", AgentOptions(), replay)
    config = tmp_path / "portkey.yaml"
    config.write_text("model:\n  model_class: portkey\n")
    with pytest.raises(ValueError, match="model class 'portkey' calls its provider itself"):
        build_agent(
            "mini-swe-agent", AgentOptions(solve_model="openai/x", agent_config=str(config)), replay
        )
    with pytest.raises(ValueError, match="needs the provider's OpenAI-compatible base URL"):
        build_agent(
            "mini-swe-agent",
            AgentOptions(solve_model="openai/x"),
            TapeConfig("record", tmp_path / "records"),
        )
