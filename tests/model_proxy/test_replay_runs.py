"""Issue 28 on the real engine: a command agent behind the model gateway (the real OpenAI
SDK in the sandbox, streaming) solves the ProgramBench offline fixture against the scripted
model, recorded with ``--model-record``; the model server is stopped; the replay
(``--model-replay``, no upstream, no key) produces the same submission hash and the same
official score with zero calls reaching the server's address (a new server there counts
them) and costs $0 (``cost_source: replay``); a one-character change in the agent's prompt
is a ``replay_miss`` under strict replay and a recorded divergence under
``--replay-order sequence``; ``harness replay-check`` says ``identical``; the key is in no
record."""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchmarks.programbench import FIXTURE_ID
from harness.cli import main as harness_main
from harness.core.models import TaskRow
from harness.model_proxy.replay_check import ReplayCheck
from harness.model_proxy.tape import REPORT_NAME, ReplayReport, TapeIndex, index_path
from harness.testing.fake_model_server import FakeModelServer, start_fake_model_server
from tests.agents.model_scripts import solve_script, solve_steps
from tests.model_proxy.support import sha
from tests.model_proxy.support import tripwire as replay_tripwire
from tests.security import model_gateway_support
from tests.security.model_gateway_support import AGENT_COMMAND, SdkInjector, files_containing
from tests.support.suite import Run, run_pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]
TARGET = "benchmarks/programbench"
KEY = "sk-replay-docker-0123456789abcdef"
PROMPT = 'open(os.environ["HARNESS_INSTRUCTION_FILE"]).read()'


@pytest.fixture(autouse=True)
def prompt_suffix(monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-sandbox agent's prompt is the instruction plus PARAMS["suffix"] ("" unless a
    test changes it by one character)."""
    agent = model_gateway_support.AGENT
    assert agent.count(PROMPT) == 1
    monkeypatch.setattr(
        model_gateway_support,
        "AGENT",
        agent.replace(PROMPT, PROMPT + ' + PARAMS.get("suffix", "")'),
    )


def prices(path: Path) -> Path:
    path.write_text(
        json.dumps({"models": {"fake-model": {"input_per_mtok": 2.0, "output_per_mtok": 10.0}}})
    )
    return path


def agent_run(
    tmp_path: Path, name: str, *extra: str, suffix: str = "", env: dict[str, str] | None = None
) -> Run:
    params = {
        "key_parts": [KEY],
        "model": "fake-model",
        "stream": True,
        "max_steps": 50,
        "suffix": suffix,
    }
    root = tmp_path / name
    with SdkInjector(root, params):
        return run_pytest(
            TARGET,
            root,
            "--pb-fixtures",
            "-k",
            "calculator",
            "--agent",
            "command",
            "--agent-command",
            AGENT_COMMAND,
            "--solve-model",
            "fake-model",
            "--model-prices",
            str(prices(tmp_path / "p.json")),
            *extra,
            env=env,
        )


@dataclass
class Recorded:
    tmp: Path
    records: Path
    run: Run
    row: TaskRow
    tripwire: FakeModelServer  # on the recording server's address: counts any call


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    tmp = tmp_path_factory.mktemp("replay")
    records = tmp / "records"
    server = start_fake_model_server(solve_script())
    with pytest.MonkeyPatch.context() as mp:
        agent = model_gateway_support.AGENT
        mp.setattr(
            model_gateway_support,
            "AGENT",
            agent.replace(PROMPT, PROMPT + ' + PARAMS.get("suffix", "")'),
        )
        try:
            run = agent_run(
                tmp,
                "record",
                "--model-upstream",
                server.base_url,
                "--model-record",
                str(records),
                env={"HARNESS_MODEL_API_KEY": KEY},
            )
        finally:
            server.stop()
    assert run.rc == 0, run.out
    assert server.requests == solve_steps()
    tripwire = replay_tripwire(server, solve_script())
    try:
        yield Recorded(tmp, records, run, TaskRow.model_validate(run.latest[FIXTURE_ID]), tripwire)
    finally:
        tripwire.stop()


@pytest.fixture(scope="module")
def checked(recorded: Recorded) -> Run:
    """``harness replay-check`` of the recorded run, once and shared: its exit code, what it
    printed and its output folder, which holds the strict replay it made (a ``--model-replay``
    run of the recorded run's own arguments, in a new run root). The plain replay's test
    reads that row, the check's test its verdict (the same session twice was the same
    artefact twice: a full agent run and an official eval)."""
    out = recorded.tmp / "check"
    printed = io.StringIO()
    with SdkInjector(
        out,
        {"key_parts": [KEY], "model": "fake-model", "stream": True, "max_steps": 50, "suffix": ""},
    ), contextlib.redirect_stdout(printed):
        rc = harness_main(
            [
                "replay-check",
                str(recorded.run.root),
                "--records",
                str(recorded.records),
                "--output",
                str(out),
            ]
        )
    return Run(rc, printed.getvalue(), out)


def test_a_recorded_run_replays_to_the_same_submission_and_score_for_free(
    recorded: Recorded, checked: Run
) -> None:
    row = recorded.row
    assert row.score == 1.0 and row.resolved is True
    assert row.details["agent"]["model_record"]["calls"] == solve_steps()
    index = TapeIndex.model_validate_json(
        index_path(recorded.records, "programbench", FIXTURE_ID).read_bytes()
    )
    assert [c.position for c in index.calls] == list(range(1, solve_steps() + 1))
    assert all(c.stream and c.status == 200 for c in index.calls)
    assert files_containing(recorded.records, KEY.encode()) == []  # the key, by scan

    replay = checked  # --model-replay of the recorded run's arguments
    check = ReplayCheck.model_validate_json((replay.root / "replay_check.json").read_bytes())
    assert "--model-replay" in check.command and "--model-upstream" not in check.command
    assert check.exit_code == 0, checked.out  # the replay session's own exit code
    again = TaskRow.model_validate(replay.latest[FIXTURE_ID])
    assert sha(again) == sha(row)
    assert (again.score, again.resolved) == (row.score, row.resolved)
    assert recorded.tripwire.requests == 0  # nothing reached the model's address
    assert again.cost_usd == 0.0 and again.cost_known is True
    assert again.details["agent"]["cost_source"] == "replay"
    replayed = again.details["agent"]["model_replay"]
    assert (replayed["calls"], replayed["served"], replayed["misses"]) == (solve_steps(), solve_steps(), 0)
    assert replayed["original_cost_usd"] == pytest.approx(row.cost_usd)
    assert again.tokens == row.tokens
    assert again.models is not None and all(m.cost_usd == 0.0 for m in again.models)


def test_a_one_character_prompt_change_misses_strictly_and_diverges_in_sequence(
    recorded: Recorded, tmp_path: Path
) -> None:
    strict = agent_run(tmp_path, "strict", "--model-replay", str(recorded.records), suffix=".")
    assert strict.rc == 0, strict.out  # the agent's failure, scored
    row = TaskRow.model_validate(strict.latest[FIXTURE_ID])
    assert (row.outcome, row.reason_code) == ("agent_failed", "replay_miss"), row
    miss = row.details["agent"]["model_replay"]["first_misses"][0]
    assert miss["position"] == 1 and miss["reason"] == "no record of this request"
    found = re.fullmatch(
        r"messages\[0\]\.content: character \d+: '(.*)' where the record has "
        r"'(.*)'",
        miss["first_difference"],
    )
    assert found is not None and found[1] == found[2] + ".", miss  # the one character
    report = ReplayReport.model_validate_json(
        (strict.root / "programbench" / FIXTURE_ID / REPORT_NAME).read_bytes()
    )
    assert len(report.misses) == 1 and report.served == []

    seq = agent_run(
        tmp_path,
        "sequence",
        "--model-replay",
        str(recorded.records),
        "--replay-order",
        "sequence",
        suffix=".",
    )
    assert seq.rc == 0, seq.out
    row = TaskRow.model_validate(seq.latest[FIXTURE_ID])
    assert row.score == 1.0 and sha(row) == sha(recorded.row)  # the recorded answers
    info = row.details["agent"]["model_replay"]
    assert (info["order"], info["divergences"], info["misses"]) == ("sequence", solve_steps(), 0)
    assert [d["position"] for d in info["first_divergences"]] == list(range(1, solve_steps() + 1))
    report = ReplayReport.model_validate_json(
        (seq.root / "programbench" / FIXTURE_ID / REPORT_NAME).read_bytes()
    )
    assert len(report.divergences) == solve_steps()
    assert recorded.tripwire.requests == 0


def test_replay_check_shows_the_trajectory_produces_its_score(
    recorded: Recorded, checked: Run
) -> None:
    assert checked.rc == 0, checked.out
    check = ReplayCheck.model_validate_json((checked.root / "replay_check.json").read_bytes())
    assert [(i.key, i.verdict) for i in check.instances] == [
        (f"programbench/{FIXTURE_ID}", "identical")
    ]
    item = check.instances[0]
    assert item.replayed_sha256 == sha(recorded.row) and item.replayed_score == 1.0
    assert (item.recorded_calls, item.replayed_calls) == (solve_steps(), solve_steps())
    assert "--model-replay" in check.command and "--model-upstream" not in check.command
    assert recorded.tripwire.requests == 0


def test_replay_refuses_an_upstream_and_record_refuses_an_agent_it_cannot_see(
    tmp_path: Path,
) -> None:
    (tmp_path / "records").mkdir()
    both = run_pytest(
        TARGET,
        tmp_path / "both",
        "--pb-fixtures",
        "-k",
        "calculator",
        "--agent",
        "command",
        "--agent-command",
        "true",
        "--model-replay",
        str(tmp_path / "records"),
        "--model-upstream",
        "http://127.0.0.1:9/v1",
    )
    assert both.rc != 0
    assert (
        "--model-replay serves every call from its records and never contacts an "
        "upstream: drop --model-upstream" in both.out
    )
    blind = run_pytest(
        TARGET,
        tmp_path / "blind",
        "--pb-fixtures",
        "-k",
        "calculator",
        "--agent",
        "command",
        "--agent-command",
        "true",
        "--model-record",
        str(tmp_path / "records"),
    )
    assert blind.rc != 0 and "add --model-upstream URL" in blind.out
