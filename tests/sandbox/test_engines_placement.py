"""Engines file parsing, slot placement and the longest-first order (no Docker)."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from harness.runner.order import ledger_durations
from harness.sandbox import placement
from harness.sandbox.engines import EngineError, EngineRecord, engine_specs, load_engines_file


def record(index: int, capacity: int) -> EngineRecord:
    return EngineRecord(url="local", capacity=capacity, index=index)


def place(root: Path | str, engines: list[EngineRecord],
          timeout_s: float | None = None) -> placement.Slot:
    return placement.acquire(root, engines, timeout_s, check=lambda engine: True)


def test_engines_file_toml_and_json(tmp_path: Path) -> None:
    toml = tmp_path / "e.toml"
    toml.write_text('[[engines]]\nurl = "ssh://a"\ncapacity = 3\nlabels = {arch = "arm64"}\n'
                    '[[engines]]\nurl = "tcp://b:2376"\n')
    specs = engine_specs([], str(toml), workers=4)
    assert [(s.url, s.capacity, s.labels) for s in specs] == [
        ("ssh://a", 3, {"arch": "arm64"}), ("tcp://b:2376", 4, {})]
    js = tmp_path / "e.json"
    js.write_text(json.dumps({"engines": [{"url": "unix:///x.sock", "capacity": 1}]}))
    assert load_engines_file(js)[0].capacity == 1


@pytest.mark.parametrize("text", ['{"engines": []}', '{"engines": [{"capacity": 1}]}',
                                  '{"engines": [{"url": "a", "cpus": 1}]}', "not json"])
def test_a_bad_engines_file_is_one_line_naming_it(tmp_path: Path, text: str) -> None:
    path = tmp_path / "e.json"
    path.write_text(text)
    with pytest.raises(EngineError, match=r"^--engines .*e\.json: ") as info:
        load_engines_file(path)
    assert "\n" not in str(info.value)


def test_an_ssh_url_holding_a_password_is_refused(tmp_path: Path) -> None:
    """ssh's command line is built from the URL: no secret may come with it (a key does)."""
    with pytest.raises(EngineError, match="no password in an ssh:// URL") as info:
        engine_specs(["ssh://root:s3cret@h"], None, 1)
    assert "s3cret" not in str(info.value)
    with pytest.raises(EngineError, match="no query"):
        engine_specs(["ssh://h?IdentityFile=x"], None, 1)


def test_duplicate_engines_and_both_options_are_refused(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="listed twice"):
        engine_specs(["tcp://a", "tcp://a"], None, 2)
    with pytest.raises(EngineError, match="either"):
        engine_specs(["tcp://a"], str(tmp_path / "x.toml"), 2)
    assert engine_specs([], None, 2) == []


def test_slots_spread_over_engines_and_block_at_capacity(tmp_path: Path) -> None:
    engines = [record(0, 1), record(1, 2)]
    first = place(tmp_path, engines)
    second = place(tmp_path, engines)
    third = place(tmp_path, engines)
    assert sorted(s.engine.index for s in (first, second, third)) == [0, 1, 1]
    with pytest.raises(TimeoutError):
        place(tmp_path, engines, timeout_s=0.5)
    first.release()
    assert place(tmp_path, engines, timeout_s=5).engine.index == 0


def _hold(root: str, conn: multiprocessing.connection.Connection) -> None:
    slot = place(root, [record(0, 1)])
    conn.send(slot.engine.index)
    conn.recv()  # hold until told, then exit without releasing: the kernel drops the lock


def test_a_slot_is_held_across_processes_and_freed_when_its_holder_dies(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_hold, args=(str(tmp_path), child))
    proc.start()
    assert parent.recv() == 0
    with pytest.raises(TimeoutError):
        place(tmp_path, [record(0, 1)], timeout_s=0.5)
    proc.kill()
    proc.join()
    assert place(tmp_path, [record(0, 1)], timeout_s=5).engine.index == 0


def test_a_lost_engine_gets_nothing_and_none_left_is_an_error(tmp_path: Path) -> None:
    engines = [record(0, 4), record(1, 4)]
    placement.mark_lost(tmp_path, 0, "test")
    assert place(tmp_path, engines).engine.index == 1
    placement.mark_lost(tmp_path, 1, "test")
    with pytest.raises(placement.NoEngineLeft):
        place(tmp_path, engines)


def test_durations_from_ledgers_last_row_wins(tmp_path: Path) -> None:
    rows = [{"instance_id": "a", "duration_s": 5.0, "outcome": "completed"},
            {"instance_id": "a", "duration_s": 7.0, "outcome": "completed"},
            {"instance_id": "b", "duration_s": 0.0, "outcome": "skipped"}]
    (tmp_path / "result_index.jsonl").write_text(
        "\n".join(json.dumps(r) for r in rows) + '\n{"torn')
    assert ledger_durations([str(tmp_path)]) == {"a": 7.0}
    with pytest.raises(pytest.UsageError, match=r"no result_index\.jsonl"):
        ledger_durations([str(tmp_path / "nope")])


def test_an_engine_that_does_not_answer_at_placement_is_marked_lost(tmp_path: Path) -> None:
    engines = [EngineRecord(url="tcp://dead:2376", capacity=4, index=0), record(1, 1)]
    slot = placement.acquire(tmp_path, engines, check=lambda engine: engine.url == "local")
    assert slot.engine.index == 1 and placement.is_lost(tmp_path, 0)


def test_the_command_agents_model_gateway_with_a_remote_engine_is_refused_at_startup(
    tmp_path: Path,
) -> None:
    """The relay bind-mounts the gateway's socket of this machine: a run of the command
    agent behind the gateway with an ssh:// or tcp:// engine stops at admission, in one
    line naming the fix, before any engine is contacted or instance started."""
    from harness.runner.engine_admission import relay_refusal
    from tests.support.suite import Suite

    remote = ["local", "ssh://h", "tcp://10.255.255.1:2376"]
    why = relay_refusal("command", "https://openrouter.ai/api/v1", None, remote)
    assert why is not None and "ssh://h, tcp://10.255.255.1:2376" in why and "\n" not in why
    assert "--model-replay" in (relay_refusal("command", None, "/tapes", remote) or "")
    assert relay_refusal("command", "https://u/v1", None, ["local", "unix:///x.sock"]) is None
    assert relay_refusal("host-command", "https://u/v1", None, remote) is None  # no relay
    assert relay_refusal("command", None, None, remote) is None  # no gateway

    suite = Suite(tmp_path, {"HARNESS_MODEL_API_KEY": "k"})
    suite.tasks([{"id": "t", "work": "agent"}])
    engines = tmp_path / "engines.json"
    engines.write_text(json.dumps({"engines": [{"url": "tcp://10.255.255.1:2376"}]}))
    run = suite.run(
        *("--agent", "command", "--agent-command", "true"),
        *("--model-upstream", "http://127.0.0.1:9/v1", "--engines", str(engines)),
    )
    assert run.rc == 2, run.out
    refusal = run.manifest["refusal"]
    assert refusal["reason"] == "relay_remote_engine", refusal
    assert "tcp://10.255.255.1:2376" in refusal["message"] and "\n" not in refusal["message"]
    assert run.rows == []
