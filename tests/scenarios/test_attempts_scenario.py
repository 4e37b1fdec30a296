"""Scenario (issue 24): repeated attempts and an infrastructure retry, ProgramBench on the
real engine with the offline fixture task and the oracle agent.

A run of ``--attempts 3`` is SIGKILLed as soon as its first attempt's row is written (the
next attempt is under way). Its resume (no ``--attempts``: it keeps K=3) runs only the two
attempts the kill left unsettled, on two xdist workers; one of them meets an infrastructure
fault injected once, in its official eval after its agent ran (a test-only plugin of this
module, loaded with ``-p``; no real run's option reaches it), and is retried within the run.
Asserted:

* nothing lost, nothing run twice: every attempt ``<task>@1..3`` has a final scored row, the
  settled one carried (no agent run, no eval for it in the resume), each other one run by the
  resume once, plus the retry of the faulted one;
* the faulted attempt has two rows, the infrastructure one and the retry's, and the last one
  counts (counts, mean score, exit status 0); the retry is on record by reason code;
* money: each try reserved and settled on its own (two settlements for the faulted attempt);
* every final score is the official tool's (the eval.json ``programbench eval`` wrote for the
  attempt, named by the task, read with the package's model); no container is left.

The module doubles as the fault plugin: ``-p tests.scenarios.test_attempts_scenario`` with
``$HARNESS_TEST_FAULT_ONCE`` naming a file that does not exist yet (whoever creates it fails).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.fixture import ensure_fixture
from benchmarks.programbench.fixture_tasks import ORACLE_SCORES
from harness.core.errors import InfraError
from harness.core.fsutil import create_exclusive
from tests.scenarios.pb_scenario_support import (
    TARGET,
    labelled_containers,
    ledger_rows,
    official_score,
    run_killed_after_first_row,
)
from tests.support.suite import run_pytest

# slow tier: a minute or more each on this engine (CI runs it after the default tier)
pytestmark = [pytest.mark.docker, pytest.mark.slow]

FAULT_ENV = "HARNESS_TEST_FAULT_ONCE"
FAULT_REASON = "docker_unavailable"
ATTEMPTS = [f"{FIXTURE_ID}@{k}" for k in (1, 2, 3)]
OPTIONS = ("--pb-fixtures", "-k", "calculator", "--agent", "oracle")
FAULT_PLUGIN = ("-p", "tests.scenarios.test_attempts_scenario")  # see pytest_configure


# --- the fault plugin (a pytest plugin when loaded with -p; inert in this test session) ------
def pytest_configure(config: pytest.Config) -> None:
    """Once per ``$HARNESS_TEST_FAULT_ONCE`` file (over every process of the run): the
    official eval of a ProgramBench instance fails on infrastructure, after its agent ran."""
    marker = os.environ.get(FAULT_ENV)
    if not marker:
        return
    from benchmarks.programbench import runner

    real = runner.evaluate_instance

    def evaluate_failing_once(src: Path | str, instance_id: str, **options: Any) -> Any:
        if create_exclusive(Path(marker), str(src).encode()):
            raise InfraError("injected once by the attempts scenario", FAULT_REASON)
        return real(src, instance_id, **options)

    runner.evaluate_instance = evaluate_failing_once  # type: ignore[assignment]


def _worked_on(root: Path, iid: str) -> list[str]:
    folder = root / "programbench" / iid
    return (
        sorted(p.name for p in folder.iterdir() if p.name != "result_index.jsonl")
        if folder.is_dir()
        else []
    )


def test_pb_k3_attempts_killed_resumed_and_an_infra_fault_retried(tmp_path: Path) -> None:
    ensure_fixture()  # the fixture tasks and their image, built once and reused
    score = ORACLE_SCORES[FIXTURE_ID]

    # 1. K=3 attempts at one task, SIGKILLed once the first attempt has settled.
    r1 = tmp_path / "r1"
    settled = run_killed_after_first_row(r1, *OPTIONS, "--attempts", "3")
    assert len(settled) == 1 and settled[0] in ATTEMPTS, settled
    [first] = settled
    first_row = ledger_rows(r1)[0]
    assert (first_row["sample_of"], first_row["sample"]) == (FIXTURE_ID, int(first[-1]))
    assert first_row["score"] == score and first_row["official_eval_status"] == "completed"
    assert json.loads((r1 / "run_manifest.json").read_text())["extra"]["attempts"] == 3

    # 2. The resume keeps K=3 and runs only the two unsettled attempts, on two xdist workers;
    # one of them fails on infrastructure once (its eval, after its agent ran) and is retried
    # within the run by its worker.
    marker = tmp_path / "fault-fired"
    resume = ("--resume-from", str(r1), "--agent", "oracle", "-n", "2")
    budget = ("--budget-usd", "5", "--unknown-cost-allowance-usd", "1")
    fault = (*FAULT_PLUGIN, "--retry-infra-backoff", "0.2")
    r2 = run_pytest(TARGET, tmp_path / "r2", *resume, *budget, *fault, env={FAULT_ENV: str(marker)})
    assert r2.rc == 0, r2.out
    faulted = Path(marker.read_text()).parent.name  # <run>/programbench/<attempt>/official_eval
    assert faulted in ATTEMPTS and faulted != first
    rows = ledger_rows(r2.root)
    by_id = {iid: [r for r in rows if r["instance_id"] == iid] for iid in ATTEMPTS}
    assert [r["outcome"] for r in by_id[first]] == ["carried_forward"]
    assert _worked_on(r2.root, first) == []  # no agent run, no eval for the settled attempt
    failed, retried = by_id[faulted]
    assert (failed["outcome"], failed["reason_code"]) == ("infra_failed", FAULT_REASON)
    assert failed["details"]["run"]["retried"]["attempt"] == retried["attempt"] == failed["attempt"] + 1
    assert retried["details"]["run"]["retry_of"] == {
        "attempt": failed["attempt"],
        "reason_code": FAULT_REASON,
    }
    [other] = [iid for iid in ATTEMPTS if iid not in (first, faulted)]
    assert [r["outcome"] for r in by_id[other]] == ["scored"]
    final = r2.latest
    assert sorted(final) == sorted(ATTEMPTS)
    for iid in ATTEMPTS:
        row = final[iid]
        assert (row["sample_of"], row["sample"]) == (FIXTURE_ID, int(iid[-1]))
        assert row["score"] == score and row["official_eval_status"] == "completed", row
    assert final[faulted] == retried  # the last row counts

    m = r2.manifest
    assert m["extra"]["attempts"] == 3
    assert m["resume"]["carried"] == 1 and m["resume"]["to_run"] == 2
    assert m["counts"] == {"completed": 2, "skipped": 1}, m["counts"]  # three, not four
    assert m["outcome"] == "completed" and m["mean_score"] == score
    assert m["extra"]["infra_retries"] == {"limit": 1, "retries": 1, "by_reason": {FAULT_REASON: 1}}

    _attempt_parity_held(r2.root, m, sorted(iid[-1] for iid in (faulted, other)))
    r2.result.stdout.fnmatch_lines([f"infrastructure retries 1: {FAULT_REASON} 1 *"])

    # Money: each try reserved and settled on its own; the oracle spends nothing.
    for row in (failed, retried, by_id[other][0]):
        assert row["details"]["budget"]["charged_usd"] == 0.0, row
    [record] = json.loads((r2.root / "campaign.json").read_text())["runs"]
    assert record["settled_count"] == 3 and record["settled_usd"] == 0.0
    assert record["released_count"] == record["abandoned_count"] == 0

    # Every final score is the official tool's (the eval.json of the attempt that scored it).
    roots = [r1, r2.root]
    for iid in ATTEMPTS:
        official, path = official_score({**final[iid], "instance_id": FIXTURE_ID}, roots)
        assert official == final[iid]["score"], (iid, official)
        assert path.name == f"{FIXTURE_ID}.eval.json"  # named by the task
        assert f"/{iid}/" in str(path)  # in the attempt's own folder
    evals = {
        str(path)
        for iid in ATTEMPTS
        for path in [official_score({**final[iid], "instance_id": FIXTURE_ID}, roots)[1]]
    }
    assert len(evals) == 3  # one eval per attempt, none shared
    assert [name for root in roots for name in labelled_containers(root)] == []


def _attempt_parity_held(root: Path, m: dict[str, Any], ran: list[str]) -> None:
    """Issue 41: the official parity covers the attempts' evaluations, one info per attempt."""
    [parity] = [v for k, v in m["extra"].items() if k.endswith("official_parity_attempts")]
    assert sorted(parity["by_attempt"]) == ran, parity
    assert all(r["ok"] and r["checked"] == 1 for r in parity["by_attempt"].values()), parity
    assert all((root / f"programbench_info.attempt-{k}.txt").is_file() for k in ran)
