"""The whole per-instance flow on the real Docker engine and a real PostgreSQL 15.

Per task (three of cowork_mini's five: a file task, a database task with rows only and one
with a workbook and rows; all five tasks' oracle and scripted verdicts are the runner tests',
``test_cowork_runs.py``): an internal network and one seeded sidecar; then each agent (nop,
a probe of the agent container for the file task, and for database tasks a script that
writes the rows from the agent container) gets its own agent container (sanitised task) and eval
container (full task) running the real checker. A task's agents run once for the module
(:func:`task_runs`): the tests that read the same instances share them. The oracle's
instances are the session's one oracle run through the runner (the ``oracle_run`` fixture
of ``conftest.py``: the same :func:`run_instance` with the oracle agent, one sidecar per
instance); their verdicts are replayed from the eval receipts, no checker runs again.
No skips: without Docker these tests fail.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from benchmarks.cowork_bench import models as m
from benchmarks.cowork_bench.agents import ScriptAgent, nop_agent, oracle_agent
from benchmarks.cowork_bench.classify import classify_instance
from benchmarks.cowork_bench.containers import AGENT, Limits, RunIdentity, container_spec
from benchmarks.cowork_bench.eval_once import (
    CheckerRequest,
    CheckerRun,
    CheckerRunner,
    EvalOutcome,
    evaluate_once,
)
from benchmarks.cowork_bench.images import ensure_image
from benchmarks.cowork_bench.instance import InstanceResult, run_instance
from benchmarks.cowork_bench.phases import InstanceEnv, container_checker
from benchmarks.cowork_bench.sidecar import PG_CONF_DIR, start_harness_layout, start_postgres
from benchmarks.cowork_bench.tasks import load_task
from harness.core.errors import InfraError
from harness.sandbox import (
    Sandbox,
    create_internal_network,
    leaked_resources,
    remove_labelled,
    run_lock,
)
from tests.benchmarks.cowork.cowork_agent_scripts import SCRIPTS
from tests.benchmarks.cowork.cowork_helpers import FIXTURE, CountingChecker
from tests.support.suite import Run

# slow tier: end-to-end Docker runs of a minute or more together (CI runs the tier after
# the default one, which stays under its 10 minutes)
pytestmark = [pytest.mark.docker, pytest.mark.slow]

# One task of each kind (the other file task and the other email task behave the same here).
FILE_TASKS = ["sklad-reorder-excel"]
DB_TASKS = ["gcal-standup-week", "email-weekly-report"]
COUNTED = "email-weekly-report"  # its script agent's checker runs are counted
TIMINGS: dict[str, dict[str, float]] = {}
OracleRun = tuple[Run, list[str], float]


@pytest.fixture(scope="module")
def images() -> dict[str, str]:
    return {name: ensure_image(name).image_id for name in ("pg15", "runtime")}  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def run_ident(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunIdentity]:
    root = tmp_path_factory.mktemp("cowork_run")
    ident = RunIdentity(f"cowork-test-{secrets.token_hex(4)}", root)
    with run_lock(root).acquire(timeout=0):  # sweep_stale leaves a locked run alone
        yield ident
    assert leaked_resources(run_id_prefix=ident.run_id) == {
        "containers": [], "networks": [], "volumes": []
    }  # fmt: skip


def network(ident: RunIdentity, iid: str) -> str:
    return create_internal_network(ident.run_id, iid, ident.worker, ident.run_root)


def counted(runner):  # type: ignore[no-untyped-def]
    calls: list[CheckerRequest] = []

    def run(req: CheckerRequest) -> CheckerRun:
        calls.append(req)
        return runner(req)

    run.calls = calls  # type: ignore[attr-defined]
    return run


@dataclass
class TaskRuns:
    """One task's agents in this module's run: each one's result, and the checker runner of
    each agent scored through a counter (``run.calls``)."""

    results: dict[str, InstanceResult]
    checkers: dict[str, CheckerRunner] = field(default_factory=dict)


def run_agents(
    iid: str, ident: RunIdentity, agents: dict[str, object], count: tuple[str, ...] = ()
) -> TaskRuns:
    """One network + sidecar for the task; each agent in its own instance folder. An agent
    named in ``count`` is scored by the real container checker behind a counter (given to
    :func:`run_instance`); the others by the one :func:`run_instance` makes itself."""
    task = load_task(FIXTURE, iid)
    t0 = time.monotonic()
    net = network(ident, iid)
    sidecar = start_postgres(net, ident, iid, FIXTURE / "db" / "init.sql.gz")
    TIMINGS[iid] = {"sidecar_start_s": sidecar.timings["start_s"],
                    "sidecar_seed_s": sidecar.timings["seed_s"],
                    "sidecar_total_s": time.monotonic() - t0}  # fmt: skip
    runs = TaskRuns({})
    try:
        for name, agent in agents.items():
            inst = ident.run_root / "cowork_bench" / f"{iid}--{name}"
            checker = None
            if name in count:
                env = InstanceEnv(task, FIXTURE, inst, net, sidecar, ident,
                                  ensure_image("runtime").image_id)  # fmt: skip
                checker = runs.checkers[name] = counted(container_checker(env))
            res = run_instance(task, FIXTURE, inst, agent, name, ident=ident,  # type: ignore[arg-type]
                               sidecar=sidecar, checker=checker)  # fmt: skip
            runs.results[name] = res
            for k in ("agent_phase_s", "eval_s"):
                TIMINGS[iid][f"{name}_{k}"] = res.timings.get(k, 0.0)
    finally:
        cleanup = remove_labelled(ident.labels(iid))
    assert sidecar.container.name in cleanup["containers"] and cleanup["networks"] == [net]
    return runs


def agents_of(iid: str) -> tuple[dict[str, object], tuple[str, ...]]:
    """A task's agents in this module (the oracle's instances are the shared oracle run's),
    and those whose checker runs are counted."""
    if iid in FILE_TASKS:
        return {"nop": nop_agent, "probe": ScriptAgent(PROBE, "probe")}, ()
    count = ("script",) if iid == COUNTED else ()
    return {"nop": nop_agent, "script": ScriptAgent(SCRIPTS[iid])}, count


@pytest.fixture(scope="module")
def task_runs(images, run_ident) -> Callable[[str], TaskRuns]:  # type: ignore[no-untyped-def]
    """A task's agents, run when a test first asks for the task, kept for the others."""
    done: dict[str, TaskRuns] = {}

    def get(iid: str) -> TaskRuns:
        if iid not in done:
            agents, count = agents_of(iid)
            done[iid] = run_agents(iid, run_ident, agents, count)
        return done[iid]

    return get


def verdict(res: object) -> tuple[bool | None, str]:
    ev = res.eval  # type: ignore[attr-defined]
    assert ev is not None and ev.receipt is not None, res
    return ev.passed, ev.receipt.stdout_tail


def oracle_instance(oracle_run: OracleRun, iid: str) -> tuple[Path, EvalOutcome]:
    """The shared oracle run's folder of ``iid`` and its eval, replayed from the receipt by
    :func:`evaluate_once` (the checker given is never called). The tests ask for the run
    after their own instances ran: another worker may be running it meanwhile."""
    run = oracle_run[0]
    inst = run.root / "cowork_bench" / iid
    never = CountingChecker()
    outcome = evaluate_once(inst, FIXTURE, iid, never)
    assert outcome.kind == "replayed" and never.calls == [], (outcome, run.out)
    assert outcome.receipt is not None and outcome.receipt.checker_ran, outcome
    return inst, outcome


# What the agent container holds: any answer or evaluator path anywhere under /workspace,
# and the entries of this task's folder (to show the task tree itself was there); then a
# line longer than one command-line argument may be (the log must still hold it whole).
PROBE = r"""
import json, os
hits = [os.path.join(d, n) for d, dirs, files in os.walk("/workspace") for n in dirs + files
        if n.startswith("groundtruth_workspace") or n == "evaluation"]
tasks = sorted(os.listdir("tasks/finalpool"))
task = sorted(os.listdir("tasks/finalpool/" + tasks[0])) if tasks else []
print(json.dumps({"tasks": tasks, "task": task, "hits": hits}))
print("#" * 300_000)
"""


@pytest.mark.parametrize("iid", FILE_TASKS)
def test_file_task_oracle_passes_nop_fails(iid: str, task_runs, run_ident, request) -> None:  # type: ignore[no-untyped-def]
    results = task_runs(iid).results
    inst, oracle = oracle_instance(request.getfixturevalue("oracle_run"), iid)
    assert oracle.passed is True, oracle.receipt
    passed, out = verdict(results["nop"])
    assert passed is False and "[FAIL]" in out
    assert classify_instance(inst).status == "passed"
    summary = m.AgentSummary.model_validate_json((inst / m.AGENT_SUMMARY).read_text())
    assert summary.agent == "oracle"
    assert summary.agent_container_state == "absent" and summary.preprocess_exit_code == 0
    # the agent container held the sanitised task: no groundtruth, no evaluator (the host
    # task has both, and the eval container that scored the oracle had them)
    tdir = FIXTURE / "tasks" / "finalpool" / iid
    assert (tdir / "groundtruth_workspace").is_dir() and (tdir / "evaluation").is_dir()
    probe_log = run_ident.run_root / "cowork_bench" / f"{iid}--probe" / m.AGENT_LOG_DIR
    first, long_line = (probe_log / "probe.log").read_text().splitlines()
    seen = json.loads(first)
    assert long_line == "#" * 300_000
    assert seen["hits"] == [] and seen["tasks"] == [iid]
    assert {"docs", "preprocess", "task_config.json"} <= set(seen["task"])
    print(f"\n{iid}: {json.dumps({k: round(v, 2) for k, v in TIMINGS[iid].items()})}")


@pytest.mark.parametrize("iid", DB_TASKS)
def test_db_task_needs_the_rows(iid: str, task_runs, run_ident, request) -> None:  # type: ignore[no-untyped-def]
    results = task_runs(iid).results
    oracle_dir, oracle = oracle_instance(request.getfixturevalue("oracle_run"), iid)
    assert oracle.receipt is not None
    assert oracle.passed is False and "rows missing" in oracle.receipt.stdout_tail, oracle
    passed, out = verdict(results["nop"])
    assert passed is False and "rows missing" in out, out
    passed, out = verdict(results["script"])
    assert passed is True, out
    assert (
        classify_instance(run_ident.run_root / "cowork_bench" / f"{iid}--script").status == "passed"
    )
    assert classify_instance(oracle_dir).status == "failed"
    print(f"\n{iid}: {json.dumps({k: round(v, 2) for k, v in TIMINGS[iid].items()})}")


def test_full_instance_and_eval_rerun_never_calls_the_checker_again(task_runs, run_ident) -> None:  # type: ignore[no-untyped-def]
    runs = task_runs(COUNTED)  # the script agent, scored by a counted real checker
    res, checker = runs.results["script"], runs.checkers["script"]
    inst = run_ident.run_root / "cowork_bench" / f"{COUNTED}--script"
    assert res.eval is not None and res.eval.kind == "evaluated" and res.eval.passed
    assert len(checker.calls) == 1  # type: ignore[attr-defined]
    again = evaluate_once(inst, FIXTURE, COUNTED, checker)
    assert again.kind == "replayed" and again.passed is True
    assert len(checker.calls) == 1  # type: ignore[attr-defined]
    # the checker overwrote only its scratch --res_log_file; traj_log.json is intact
    traj = m.TrajLog.model_validate_json((inst / m.TRAJ_LOG).read_text())
    assert traj.status == "success" and traj.config.evaluation["evaluation_command"] is None
    res_log = json.loads(Path(res.eval.receipt.res_log.path).read_text())  # type: ignore[union-attr]
    assert res_log["total_checks"] == 4


def test_broken_seed_is_pg_fail_and_leaves_nothing(images, run_ident, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import gzip

    bad = tmp_path / "init.sql.gz"
    bad.write_bytes(gzip.compress(b"CREATE TABLE broken (;\n"))
    iid = "excel-sales-summary"
    inst = run_ident.run_root / "cowork_bench" / f"{iid}--badseed"
    res = run_instance(load_task(FIXTURE, iid), FIXTURE, inst, oracle_agent, "oracle",
                       ident=run_ident, seed_path=bad)  # fmt: skip
    assert res.infra is not None and res.infra.reason_code == "pg_fail"
    assert "seeding init.sql.gz failed" in res.infra.message
    assert res.summary is None and res.eval is None
    assert classify_instance(inst).reason_code == "pg_fail"
    assert res.cleanup["remaining"] == [] and res.cleanup["removed_networks"]
    assert leaked_resources(run_id_prefix=run_ident.run_id)["containers"] == []


def test_a_cluster_that_cannot_start_is_pg_fail_naming_its_log(images, run_ident) -> None:  # type: ignore[no-untyped-def]
    """The start (the cluster's ``pg_ctl``) fails fast and says why, from the server's log."""
    iid = "excel-sales-summary"
    net = network(run_ident, f"{iid}--badconf")
    box = Sandbox.create(container_spec(images["pg15"], run_ident, f"{iid}--badconf",
                                        network=net, role="pg"))  # fmt: skip
    try:
        broken = box.exec(["sh", "-c", f"echo 'no_such_setting = 1' >> {PG_CONF_DIR}/postgresql.conf"],
                          user="postgres", timeout=30)
        assert broken.exit_status == 0, broken
        t0 = time.monotonic()
        with pytest.raises(InfraError) as err:
            start_harness_layout(box, None, ready_timeout_sec=30)
        assert time.monotonic() - t0 < 30  # not the readiness deadline: the start failed
        assert err.value.reason_code == "pg_fail"
        assert "starting the cluster failed" in str(err.value)
        assert 'unrecognized configuration parameter "no_such_setting"' in str(err.value)
    finally:
        remove_labelled(run_ident.labels(f"{iid}--badconf"))


def test_every_container_is_limited_unprivileged_and_the_agent_not_root(images, run_ident) -> None:  # type: ignore[no-untyped-def]
    iid = "gcal-standup-week"
    limits = Limits(cpus=0.5, memory="1g", pids=256)
    net = network(run_ident, iid)
    try:
        sidecar = start_postgres(net, run_ident, iid, None, limits=limits)
        agent = Sandbox.create(container_spec(images["runtime"], run_ident, iid, network=net,
                                              role="agent", limits=limits, user=AGENT))
        checker = Sandbox.create(container_spec(images["runtime"], run_ident, iid, network=net,
                                                role="eval-test", limits=limits))
        for box in (sidecar.container, agent, checker):
            info = box.api.inspect_container(box.id)
            host = info["HostConfig"]
            assert host["NanoCpus"] == 500_000_000 and host["Memory"] == 1 << 30, box.name
            assert host["PidsLimit"] == 256 and host["CapDrop"] == ["ALL"], box.name
            assert host["SecurityOpt"] == ["no-new-privileges"], box.name
        assert agent.api.inspect_container(agent.id)["Config"]["User"] == "agent"
        # a `docker exec` without -u (a gateway's process tools) is the agent, not root
        exec_id = agent.api.exec_create(agent.id, ["id", "-u"])["Id"]
        assert agent.api.exec_start(exec_id).strip() == b"1000"
    finally:
        cleanup = remove_labelled(run_ident.labels(iid))
    assert len(cleanup["containers"]) == 3 and cleanup["networks"] == [net]
