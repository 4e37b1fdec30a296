"""Issue 28 for mini-swe-agent: its litellm calls go through an in-process model gateway
when ``--model-record`` or ``--model-replay`` is on. The real package solves the
ProgramBench offline fixture against the scripted model, recorded; the model server is
stopped; the replay (no key, no upstream) gets the same submission hash and the same
official score with zero calls reaching the server's address and costs $0; a one-character
change in the agent's system prompt is a ``replay_miss`` under strict replay (at once: no
retries) and a recorded divergence under ``--replay-order sequence``; the key (held by the
gateway, never by litellm) is in no record."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from benchmarks.programbench import FIXTURE_ID
from harness.agents.mini_swe import default_config_path
from harness.core.models import TaskRow
from harness.model_proxy.tape import REPORT_NAME, ReplayReport, TapeIndex, index_path
from harness.testing.fake_model_server import FakeModelServer, start_fake_model_server
from tests.agents.model_scripts import solve_script, solve_steps
from tests.agents.test_mini_swe_agent import MODEL, TARGET, prices
from tests.model_proxy.support import sha
from tests.model_proxy.support import tripwire as replay_tripwire
from tests.security.model_gateway_support import files_containing
from tests.support.suite import Run, run_pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]
KEY = "sk-mini-replay-0123456789abcdef"


def config(path: Path, base_url: str, suffix: str = "") -> Path:
    """The agent's config: the scripted server (its key is not this one: the gateway's
    $HARNESS_MODEL_API_KEY wins), and the pinned system prompt plus ``suffix``."""
    system = yaml.safe_load(default_config_path().read_text())["agent"]["system_template"]
    cfg = {
        "model": {"model_kwargs": {"api_base": base_url, "api_key": "not-the-key"}},
        "agent": {"system_template": system + suffix},
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


def mini_run(
    tmp_path: Path,
    name: str,
    base_url: str,
    *extra: str,
    suffix: str = "",
    env: dict[str, str] | None = None,
) -> Run:
    return run_pytest(
        TARGET,
        tmp_path / name,
        "--pb-fixtures",
        "-k",
        "calculator",
        "--agent",
        "mini-swe-agent",
        "--solve-model",
        MODEL,
        "--agent-config",
        str(config(tmp_path / f"{name}.yaml", base_url, suffix)),
        "--model-prices",
        str(prices(tmp_path / "p.json")),
        *extra,
        env=env,
    )


@dataclass
class Recorded:
    records: Path
    row: TaskRow
    base_url: str
    tripwire: FakeModelServer


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    tmp = tmp_path_factory.mktemp("mini-replay")
    records = tmp / "records"
    server = start_fake_model_server(solve_script(), log=tmp / "requests.jsonl")
    try:
        run = mini_run(
            tmp,
            "record",
            server.base_url,
            "--model-record",
            str(records),
            env={"HARNESS_MODEL_API_KEY": KEY},
        )
    finally:
        server.stop()
    assert run.rc == 0, run.out
    seen = [json.loads(x) for x in (tmp / "requests.jsonl").read_text().splitlines()]
    assert len(seen) == solve_steps() and {r["model"] for r in seen} == {"fake-model"}
    tripwire = replay_tripwire(server, solve_script())
    try:
        yield Recorded(
            records, TaskRow.model_validate(run.latest[FIXTURE_ID]), server.base_url, tripwire
        )
    finally:
        tripwire.stop()


def test_mini_swe_replays_to_the_same_submission_and_score_for_free(
    recorded: Recorded, tmp_path: Path
) -> None:
    row = recorded.row
    assert row.score == 1.0 and row.resolved is True
    assert row.details["agent"]["cost_source"] == "agent_reported"  # recording changes nothing
    assert row.cost_usd == pytest.approx(solve_steps() * (1000 * 2.0 + 100 * 10.0) / 1e6)
    assert row.details["agent"]["model_record"]["calls"] == solve_steps()
    index = TapeIndex.model_validate_json(
        index_path(recorded.records, "programbench", FIXTURE_ID).read_bytes()
    )
    assert len(index.calls) == solve_steps() and not any(c.stream for c in index.calls)
    assert files_containing(recorded.records, KEY.encode()) == []
    assert files_containing(recorded.records, b"not-the-key") == []

    replay = mini_run(
        tmp_path, "replay", recorded.base_url, "--model-replay", str(recorded.records)
    )
    assert replay.rc == 0, replay.out
    again = TaskRow.model_validate(replay.latest[FIXTURE_ID])
    assert sha(again) == sha(row) and (again.score, again.resolved) == (1.0, True)
    assert recorded.tripwire.requests == 0
    assert again.cost_usd == 0.0 and again.details["agent"]["cost_source"] == "replay"
    info = again.details["agent"]["model_replay"]
    assert (info["calls"], info["served"], info["misses"]) == (solve_steps(), solve_steps(), 0)
    assert info["original_cost_usd"] == pytest.approx(row.cost_usd)
    assert again.details["agent"]["details"]["steps"] == solve_steps() and again.steps == solve_steps()


def test_mini_swe_prompt_change_misses_strictly_and_diverges_in_sequence(
    recorded: Recorded, tmp_path: Path
) -> None:
    strict = mini_run(
        tmp_path, "strict", recorded.base_url, "--model-replay", str(recorded.records), suffix="."
    )
    assert strict.rc == 0, strict.out
    row = TaskRow.model_validate(strict.latest[FIXTURE_ID])
    assert (row.outcome, row.reason_code) == ("agent_failed", "replay_miss"), row
    report = ReplayReport.model_validate_json(
        (strict.root / "programbench" / FIXTURE_ID / REPORT_NAME).read_bytes()
    )
    assert [m.position for m in report.misses] == [1]  # at once: no retried calls
    assert report.misses[0].first_difference is not None
    assert report.misses[0].first_difference.startswith("messages[0].content: character ")

    seq = mini_run(
        tmp_path,
        "sequence",
        recorded.base_url,
        "--model-replay",
        str(recorded.records),
        "--replay-order",
        "sequence",
        suffix=".",
    )
    assert seq.rc == 0, seq.out
    row = TaskRow.model_validate(seq.latest[FIXTURE_ID])
    assert row.score == 1.0 and sha(row) == sha(recorded.row)
    info = row.details["agent"]["model_replay"]
    assert (info["divergences"], info["misses"]) == (solve_steps(), 0)
    assert recorded.tripwire.requests == 0
