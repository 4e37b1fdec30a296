"""Infrastructure retries inside the run (``--retry-infra N``, issue 24): an instance whose
try failed on infrastructure runs again in the same run after a backoff, a new budget
reservation and sandbox each time; every try keeps its ledger row and the last one counts.
Never retried: an agent's failure, an interrupted try, a run that is stopping.

Runs of the built-in ``selftest`` benchmark in a pytest subprocess, whose test module here
injects the fault (test-only: a real run cannot reach it), and in-process checks of what a
retry shows the agent of its earlier try (as a resume shows an ancestor's)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from harness.core.adapter import BenchmarkAdapter, InstanceSpec
from harness.core.models import Plan
from harness.runner.instance import EarlierTry, InstanceContext, RunContext
from tests.support.suite import Run, Suite, finish, pytest_result, wait_for

FAST = ("--retry-infra-backoff", "0.05")

# The suite's test module: a task's "fault" fails its first ``faults`` tries (counted over
# the suite's runs) on infrastructure, after its agent started and spent, then the selftest
# work runs.
RETRY_TEST = """
import os
import time
from pathlib import Path

import pytest
from harness.core.errors import InfraError
from harness.testing.adapter import EXECUTIONS, run_selftest_instance

pytestmark = pytest.mark.harness_benchmark("selftest")


def test_selftest(harness_instance, request):
    ctx = harness_instance
    fault = ctx.data.get("fault")
    tries = Path(__file__).with_name(f"tries-{ctx.instance_id}")  # across runs (resumes)
    done = len(tries.read_text()) if tries.exists() else 0
    with open(tries, "a") as fh:
        fh.write("x")
    if fault is None or done >= int(ctx.data.get("faults", 1)):
        run_selftest_instance(ctx, request)
        return
    with open(ctx.run_root / EXECUTIONS, "a", encoding="utf-8") as log:
        log.write(f"{ctx.instance_id} {os.getpid()} {time.time():.3f}\\n")
    ctx.result.agent_started = True
    if "cost" in ctx.data:
        ctx.result.cost_usd, ctx.result.cost_known = float(ctx.data["cost"]), True
    if fault == "sleep":
        time.sleep(30)
    raise InfraError("injected infrastructure fault", "docker_unavailable")
"""


def retry_suite(suite: Suite, tasks: list[dict[str, Any]]) -> Suite:
    (suite.path / "test_selftest.py").write_text(RETRY_TEST)
    suite.tasks(tasks)
    return suite


def rows_of(run: Run, iid: str) -> list[dict[str, Any]]:
    return [r for r in run.rows if r["instance_id"] == iid]


def test_an_infra_failure_is_retried_to_success_and_the_last_row_counts(
    suite: Suite, mode: list[str], tmp_path: Path
) -> None:
    retry_suite(
        suite,
        [
            {"id": "alpha", "work": "succeed", "fault": "infra", "cost": 0.25},
            {"id": "bravo", "work": "agent_fail", "cost": 0.1},  # the agent's: never retried
            {"id": "charlie", "work": "fail", "cost": 0.1},
        ],
    )
    campaign = tmp_path / "campaign.json"
    run = suite.run(
        *FAST,
        *mode,
        "--campaign-file",
        str(campaign),
        "--campaign-budget-usd",
        "10",
        "--unknown-cost-allowance-usd",
        "1",
    )
    assert run.rc == 0, run.out
    assert sorted(run.executions()) == ["alpha", "alpha", "bravo", "charlie"]
    first, second = rows_of(run, "alpha")
    assert (first["outcome"], first["reason_code"], first["attempt"]) == (
        "infra_failed",
        "docker_unavailable",
        1,
    )
    assert first["details"]["run"]["retried"] == {"attempt": 2, "backoff_s": 0.05}
    assert (second["outcome"], second["score"], second["attempt"]) == ("scored", 1.0, 2)
    assert second["details"]["run"]["retry_of"] == {"attempt": 1, "reason_code": "docker_unavailable"}
    assert run.latest["alpha"] == second  # the last row counts
    assert len(rows_of(run, "bravo")) == len(rows_of(run, "charlie")) == 1
    assert (run.root / "selftest" / "alpha" / "result_index.jsonl").read_text().count("\n") == 2
    m = run.manifest
    assert m["outcome"] == "completed" and m["exit_code"] == 0
    assert m["counts"] == {"completed": 2, "failed": 1}  # alpha once, by its last row
    assert m["outcome_counts"] == {"agent_failed": 1, "scored": 2}
    assert m["mean_score"] == pytest.approx(1 / 3)
    assert m["extra"]["infra_retries"] == {
        "limit": 1,
        "retries": 1,
        "by_reason": {"docker_unavailable": 1},
    }
    run.result.stdout.fnmatch_lines(
        [
            "*run selftest-*: 3 selected; completed 2, failed 1",
            "infrastructure retries 1: docker_unavailable 1 (each try has its row; the last counts)",
            "*2 failed, 1 passed, 1 rerun*",
        ]
    )
    # Each try reserved on its own and was settled at its cost: alpha twice.
    assert first["details"]["budget"]["charged_usd"] == second["details"]["budget"]["charged_usd"] == 0.25
    [record] = json.loads(campaign.read_text())["runs"]
    assert record["settled_count"] == 4 and record["settled_usd"] == pytest.approx(0.7)
    assert record["released_count"] == 0 and record["abandoned_count"] == 0


def test_the_default_backoff_is_one_second(suite: Suite) -> None:
    suite.default_args = ()  # the product's defaults, not the suite's immediate retry
    retry_suite(suite, [{"id": "alpha", "work": "succeed", "fault": "infra", "faults": 1}])
    run = suite.run()
    assert run.rc == 0, run.out
    assert run.rows[0]["details"]["run"]["retried"] == {"attempt": 2, "backoff_s": 1.0}
    assert [r["attempt"] for r in run.rows] == [1, 2]


def test_retries_are_bounded_backed_off_and_can_be_turned_off(suite: Suite) -> None:
    retry_suite(suite, [{"id": "alpha", "work": "succeed", "fault": "infra", "faults": 9}])
    default = suite.run(*FAST)
    assert default.rc == 1, default.out
    assert [r["attempt"] for r in default.rows] == [1, 2]
    assert default.manifest["counts"] == {"infra_failed": 1}  # one instance, not two
    assert "retried" not in default.rows[-1]["details"].get("run", {})  # the limit: no more
    more = suite.run(*FAST, "--retry-infra", "2")
    assert [r["attempt"] for r in more.rows] == [1, 2, 3]
    assert [r["details"].get("run", {}).get("retried", {}).get("backoff_s") for r in more.rows] == [
        0.05,
        0.1,
        None,
    ]  # doubled each time
    assert more.manifest["extra"]["infra_retries"]["retries"] == 2
    off = suite.run("--retry-infra", "0")
    assert len(off.rows) == 1 and "infra_retries" not in off.manifest["extra"]
    assert "infrastructure retries" not in off.out
    bad = suite.run("--retry-infra", "-1")
    assert bad.rc == 2 and "--retry-infra '-1' is not an integer >= 0" in bad.out, bad.out


def test_a_resume_after_retries_reads_the_last_row(suite: Suite) -> None:
    retry_suite(
        suite,
        [
            {"id": "alpha", "work": "succeed", "fault": "infra", "faults": 2},
            {"id": "bravo", "work": "succeed", "fault": "infra"},
        ],
    )
    first = suite.run(*FAST)  # alpha fails twice (retry included), bravo once then succeeds
    assert first.rc == 1, first.out
    assert [r["attempt"] for r in rows_of(first, "alpha")] == [1, 2]
    second = suite.run(*FAST, "--resume-from", str(first.root))
    assert second.rc == 0, second.out
    assert second.executions() == ["alpha"]  # bravo's last row settled it
    assert second.latest["alpha"]["attempt"] == 3 and second.latest["alpha"]["score"] == 1.0
    assert second.latest["bravo"]["outcome"] == "carried_forward"
    assert second.latest["bravo"]["attempt"] == 2


def test_an_interrupted_try_is_never_retried(suite: Suite) -> None:
    retry_suite(suite, [{"id": "alpha", "work": "succeed", "fault": "sleep"}])
    proc, root = suite.start(*FAST)
    wait_for(lambda: (root / "selftest_executions.log").is_file())
    os.kill(proc.pid, signal.SIGINT)
    out = finish(proc)
    assert proc.returncode == 3, out
    run = Run.of(root)
    assert run.executions() == ["alpha"]
    [row] = run.rows
    assert row["reason_code"] == "interrupted:signal_2" and "retried" not in row["details"].get("run", {})
    assert "infra_retries" not in run.manifest["extra"]


def test_a_stop_during_the_backoff_ends_the_run_without_the_retry(
    suite: Suite, mode: list[str]
) -> None:
    retry_suite(suite, [{"id": "alpha", "work": "succeed", "fault": "infra"}])
    proc, root = suite.start("--retry-infra-backoff", "60", *mode)
    ledger = root / "result_index.jsonl"
    wait_for(lambda: ledger.is_file() and ledger.read_text().count("\n") >= 1)
    stopped = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    out = finish(proc)
    assert time.monotonic() - stopped < 30, out  # the 60 s backoff was cut short
    assert proc.returncode == 3, out
    run = Run.of(root)
    assert run.executions() == ["alpha"]  # the retry never ran
    first, last = run.rows
    assert first["details"]["run"]["retried"]["backoff_s"] == 60
    assert last["outcome"] == "blocked" and last["reason_code"] == "signal_15"
    assert run.manifest["outcome"] == "stopped"
    pytest_result(proc.returncode, out).stdout.fnmatch_lines(["*resume with: pytest *"])


# --- what a retry shows the agent of its earlier try (in process) ----------------------------


class _Bench(BenchmarkAdapter):
    name = "bench"


def _context(root: Path, retry_of: EarlierTry | None) -> InstanceContext:
    plan = Plan(
        run_id="r", created_at_unix=0.0, ancestors=["/earlier/run"], attempts={"bench/t@2": 4}
    )
    run = RunContext(
        run_id="r", run_root=root, worker_id="gw0", role="worker", plan=plan, adapters={}, samples=3
    )
    return InstanceContext(
        run, _Bench(), InstanceSpec("t").attempt(2), "test[t@2]", retry_of=retry_of
    )


def test_a_retry_sees_its_run_root_as_the_nearest_earlier_attempt(tmp_path: Path) -> None:
    from harness.agents.gateway.checkpoint import AgentFolder, write_checkpoint
    from harness.agents.gateway.orphans import orphan_checkpoints
    from harness.runner.agent_run import instance_view

    first = _context(tmp_path, None)
    assert (first.instance_id, first.task_id, first.sample, first.key) == (
        "t@2",
        "t",
        2,
        "bench/t@2",
    )
    assert first.attempt == 4 and first.budget_key == "bench/t@2"
    assert instance_view(first).ancestors == (Path("/earlier/run"),)
    write_checkpoint(
        AgentFolder(first.instance_dir).checkpoint, "task-1", "running", None, "http://gateway", 3
    )  # the first try left its task running

    retry = _context(tmp_path, EarlierTry(index=1, attempt=4, reason_code="gateway_poll_error"))
    assert retry.instance_dir == first.instance_dir and retry.attempt == 5
    assert retry.budget_key == "bench/t@2#retry1"  # its own reservation
    assert retry.run.plan.attempts == first.run.plan.attempts
    view = instance_view(retry)
    assert view.ancestors == (tmp_path, Path("/earlier/run"))  # as a resume sees an ancestor
    # The gateway agent's fresh start settles the earlier try's task first.
    found = orphan_checkpoints(
        AgentFolder(retry.instance_dir),
        benchmark="bench",
        instance_id=retry.instance_id,
        ancestors=view.ancestors,
    )
    assert len(found) == 1 and ".earlier-" in found[0]


def test_a_retry_reattaches_to_the_sandbox_its_earlier_try_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.agents.gateway import run as gateway_run
    from harness.agents.gateway.agent import GatewayAgent
    from harness.agents.gateway.checkpoint import AgentFolder, write_checkpoint
    from harness.agents.gateway.reattach import adopt_kept_sandbox
    from harness.runner.agent_run import instance_view
    from harness.sandbox.reattach import SandboxRecord, write_record

    first = _context(tmp_path, None)
    write_checkpoint(
        AgentFolder(first.instance_dir).checkpoint, "task-1", "running", None, "http://gateway", 3
    )
    write_record(
        first.instance_dir,
        SandboxRecord(
            container_id="c1",
            name="harness-r-t-1",
            image="img",
            run_id="r",
            instance_id="t@2",
            run_root=str(tmp_path),
            worker="gw0",
            user="agent",
            workdir="/workspace",
            ttl_s=600,
            created_unix=time.time(),
            reattachable=True,
        ),
    )
    monkeypatch.setattr(
        gateway_run,
        "reattach_decision",
        lambda client, path: gateway_run.ReattachDecision(
            action="reattach", reason="task_running", task_id="task-1", status="running"
        ),
    )

    class Keeper:
        adopted: list[SandboxRecord] = []

        def adopt(self, record: SandboxRecord) -> Any:
            self.adopted.append(record)
            return "the kept sandbox"

        def keep(self, sandbox: Any) -> None:
            raise AssertionError("not kept")

    agent = GatewayAgent("http://127.0.0.1:9")
    assert adopt_kept_sandbox(instance_view(first), agent, Keeper()) is None  # the ancestor's
    retry = _context(tmp_path, EarlierTry(index=1, attempt=4, reason_code="gateway_poll_error"))
    keeper = Keeper()
    adopted = adopt_kept_sandbox(instance_view(retry), agent, keeper)
    assert adopted is not None
    sandbox, extra = adopted
    assert sandbox == "the kept sandbox" and keeper.adopted[0].container_id == "c1"
    assert extra == {
        "reattach": True,
        "reattach_checkpoint": str(AgentFolder(retry.instance_dir).checkpoint),
    }
    assert retry.result.details["agent"]["reattach"]["adopted"] is True


@pytest.mark.parametrize(("code", "retried"), [
    ("exec_failed", True), ("docker_unavailable", True), (None, True),
    ("interrupted:signal_15", False), ("image_missing", False), ("seed_unavailable", False),
    ("official_parity_mismatch", False), ("engine_lost", False)])
def test_only_infrastructure_a_second_try_can_change_is_retried(code: str | None,
                                                                 retried: bool) -> None:
    from harness.runner.worker import RetryPolicy

    assert RetryPolicy.retryable(code) is retried
