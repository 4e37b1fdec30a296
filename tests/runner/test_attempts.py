"""Repeated attempts (``--attempts K``, issue 24): each instance is K pytest items
``<id>@1`` ... ``<id>@K``, each its own unit everywhere (key, folder, row, selection by -k,
--lf, --instance and --shard, resume); K=1 runs exactly as before.

Runs of the built-in ``selftest`` benchmark in a pytest subprocess (``tests.support.suite``);
its test module here can make one attempt of a task behave unlike the others
(``attempt_work.json``: attempt id -> ``fail``, ``infra``, ``sleep``)."""

from __future__ import annotations

import json
from typing import Any

from harness.core.models import ShardSpec
from harness.run.plan import in_shard
from tests.support.suite import FORK_SERVER, Run, Suite

TASKS = [{"id": "alpha", "work": "succeed"}, {"id": "bravo", "work": "fail"}]

# The suite's test module: the selftest instance, unless attempt_work.json names the attempt.
ATTEMPT_TEST = """
import json
import os
import time
from pathlib import Path

import pytest
from harness.core.errors import InfraError
from harness.testing.adapter import EXECUTIONS, run_selftest_instance

pytestmark = pytest.mark.harness_benchmark("selftest")
OVERRIDES = Path(__file__).with_name("attempt_work.json")


def test_selftest(harness_instance, request):
    ctx = harness_instance
    work = json.loads(OVERRIDES.read_text()).get(ctx.instance_id) if OVERRIDES.exists() else None
    if work is None:
        run_selftest_instance(ctx, request)
        return
    with open(ctx.run_root / EXECUTIONS, "a", encoding="utf-8") as log:
        log.write(f"{ctx.instance_id} {os.getpid()} {time.time():.3f}\\n")
    ctx.result.agent_started = True
    if work == "fail":
        ctx.scored(score=0.0)
    elif work == "infra":
        raise InfraError("simulated infrastructure failure", "docker_unavailable")
    elif work == "sleep":
        time.sleep(30)
        ctx.scored(score=1.0)
"""


def attempt_suite(
    suite: Suite, work: dict[str, str] | None = None, tasks: list[dict[str, Any]] | None = None
) -> Suite:
    (suite.path / "test_selftest.py").write_text(ATTEMPT_TEST)
    (suite.path / "attempt_work.json").write_text(json.dumps(work or {}))
    suite.tasks(TASKS if tasks is None else tasks)
    return suite


def ids(k: int, tasks: tuple[str, ...] = ("alpha", "bravo")) -> list[str]:
    return [f"{t}@{n}" for n in range(1, k + 1) for t in tasks]


def test_k_attempts_are_k_items_each_its_own_row_and_folder(suite: Suite, mode: list[str]) -> None:
    run = attempt_suite(suite).run("--attempts", "3", *mode)
    assert run.rc == 0, run.out
    assert sorted(run.executions()) == sorted(ids(3))  # each attempt ran once
    rows = run.latest
    assert sorted(rows) == sorted(ids(3)) and len(run.rows) == 6
    for iid, r in rows.items():
        task, k = iid.split("@")
        assert (r["sample_of"], r["sample"], r["attempt"]) == (task, int(k), 1)
        assert r["score"] == (1.0 if task == "alpha" else 0.0)
        assert r["nodeid"].endswith(f"test_selftest[{iid}]")
        folder = run.root / "selftest" / iid
        body = json.loads((folder / "selftest_task_body.json").read_text())
        assert body["instance_id"] == iid  # the attempt's own folder and files
        assert [
            json.loads(line)["instance_id"]
            for line in (folder / "result_index.jsonl").read_text().splitlines()
        ] == [iid]
    m = run.manifest
    assert m["extra"]["attempts"] == 3
    assert sorted(m["selection"]["instance_ids"]) == sorted(f"selftest/{i}" for i in ids(3))
    assert m["counts"] == {"completed": 6} and m["mean_score"] == 0.5
    run.result.stdout.fnmatch_lines(["*3 failed, 3 passed*"])


def test_k1_runs_exactly_as_before(suite: Suite) -> None:
    attempt_suite(suite)
    default, one = suite.run(), suite.run("--attempts", "1")
    for run in (default, one):
        assert run.rc == 0, run.out  # every instance settled (bravo scored 0)
        assert sorted(run.latest) == ["alpha", "bravo"] and sorted(run.executions()) == [
            "alpha",
            "bravo",
        ]
        assert sorted(p.name for p in (run.root / "selftest").iterdir()) == ["alpha", "bravo"]
        extra = run.manifest["extra"]
        assert "attempts" not in extra and "infra_retries" not in extra
        for r in run.rows:
            assert r["sample_of"] is None and r["sample"] is None and r["attempt"] == 1
            run_section = r["details"].get("run", {})
            assert "retried" not in run_section and "retry_of" not in run_section
            assert r["nodeid"].endswith(f"test_selftest[{r['instance_id']}]")
    volatile = {"ts_unix", "run_id", "duration_s"}
    for iid in ("alpha", "bravo"):
        a = {k: v for k, v in default.latest[iid].items() if k not in volatile}
        b = {k: v for k, v in one.latest[iid].items() if k not in volatile}
        assert a == b and list(default.latest[iid]) == list(one.latest[iid])


def test_k_instance_and_shard_select_attempts(suite: Suite) -> None:
    attempt_suite(suite)
    by_k = suite.run("--attempts", "3", "-k", "alpha@2 or bravo@3")
    assert sorted(by_k.latest) == ["alpha@2", "bravo@3"], by_k.out
    assert by_k.manifest["selection"]["selectors"]["keyword"] == "alpha@2 or bravo@3"
    second = suite.run("--attempts", "3", "-k@2")  # "-k @2": argparse reads file "2"
    assert sorted(second.latest) == ["alpha@2", "bravo@2"], second.out
    task = suite.run("--attempts", "3", "-k", "alpha")
    assert sorted(task.latest) == ["alpha@1", "alpha@2", "alpha@3"], task.out
    named = suite.run("--attempts", "3", "--instance", "bravo@2", "--instance", "alpha")
    assert sorted(named.latest) == ["alpha@1", "alpha@2", "alpha@3", "bravo@2"], named.out
    beyond = suite.run("--attempts", "3", "--instance", "alpha@4")
    assert beyond.rc == 2, beyond.out
    beyond.result.stdout.fnmatch_lines(["*--instance alpha@4: no such instance id*"])
    bad = suite.run("--attempts", "0")
    assert bad.rc == 2 and "--attempts '0' is not an integer >= 1" in bad.out, bad.out

    seen: list[str] = []
    for index in (1, 2):
        shard = suite.run("--attempts", "3", "--shard", f"{index}/2")
        keys = shard.manifest["selection"]["instance_ids"]
        spec = ShardSpec(index=index, count=2)
        assert keys == [k for k in (f"selftest/{i}" for i in ids(3)) if in_shard(k, spec)]
        assert sorted(shard.latest) == sorted(k.split("/")[1] for k in keys)
        seen += shard.executions()
    assert sorted(seen) == sorted(ids(3))  # every attempt in exactly one shard


def test_last_failed_reruns_only_the_failed_attempts(suite: Suite) -> None:
    """``--lf`` (pytest's cache) keys by node id: the attempts that failed, not their task."""
    attempt_suite(suite, {"alpha@2": "fail"}, [{"id": "alpha", "work": "succeed"}])

    def run_with_cache(*args: str) -> Run:
        root = suite.new_root()
        cmd = [a for a in suite.command(root, *args) if a != "no:cacheprovider"]
        cmd.remove("-p")  # the pair "-p no:cacheprovider": the cache is what --lf reads
        done = FORK_SERVER.run(
            [*cmd[3:], "-o", f"cache_dir={suite.path / '.cache'}"], suite.path, suite.env(), 120
        )
        return Run(done.returncode, done.output, root)

    first = run_with_cache("--attempts", "3")
    assert sorted(first.executions()) == ["alpha@1", "alpha@2", "alpha@3"], first.out
    assert first.latest["alpha@2"]["score"] == 0.0
    again = run_with_cache("--attempts", "3", "--lf")
    assert again.executions() == ["alpha@2"], again.out
    assert list(again.latest) == ["alpha@2"]


def test_resume_completes_only_the_missing_attempts_and_keeps_k(
    suite: Suite, mode: list[str]
) -> None:
    attempt_suite(suite, {"bravo@2": "infra"})
    first = suite.run("--attempts", "3", "--retry-infra", "0", *mode)
    assert first.rc == 1, first.out
    assert first.latest["bravo@2"]["outcome"] == "infra_failed"
    attempt_suite(suite, {})  # the infrastructure is back
    second = suite.run("--resume-from", str(first.root), *mode)  # K comes from the ancestor
    assert second.rc == 0, second.out
    assert second.executions() == ["bravo@2"]
    rows = second.latest
    assert sorted(rows) == sorted(ids(3))
    assert rows["bravo@2"]["outcome"] == "scored" and rows["bravo@2"]["attempt"] == 2
    carried = [i for i, r in rows.items() if r["outcome"] == "carried_forward"]
    assert sorted(carried) == sorted(i for i in ids(3) if i != "bravo@2")
    assert all(rows[i]["sample_of"] == i.split("@")[0] for i in carried)
    m = second.manifest
    assert m["extra"]["attempts"] == 3
    assert m["resume"]["carried"] == 5 and m["resume"]["to_run"] == 1
    assert m["outcome"] == "completed" and m["mean_score"] == 0.5


def test_a_resume_with_a_larger_k_runs_only_the_new_attempts(suite: Suite) -> None:
    attempt_suite(suite)
    one = suite.run()  # K=1: its rows are the first attempts
    assert one.rc == 0, one.out
    two = suite.run("--resume-from", str(one.root), "--attempts", "2")
    assert two.rc == 0, two.out
    assert sorted(two.executions()) == ["alpha@2", "bravo@2"]
    assert two.manifest["extra"]["attempts"] == 2
    assert two.latest["alpha@1"]["carried_from"] == one.manifest["run_id"]
    three = suite.run("--resume-from", str(two.root), "--attempts", "3")
    assert three.rc == 0, three.out
    assert sorted(three.executions()) == ["alpha@3", "bravo@3"]
    assert sorted(three.latest) == sorted(ids(3))
    again = suite.run("--resume-from", str(three.root))  # keeps K=3: nothing left
    assert again.rc == 0 and again.manifest["outcome"] == "nothing_remaining", again.out
    assert again.executions() == [] and again.manifest["extra"]["attempts"] == 3


def test_a_resume_with_selectors_and_another_k_compares_the_same_attempts(suite: Suite) -> None:
    attempt_suite(suite)
    one = suite.run()
    two = suite.run("--resume-from", str(one.root), "--attempts", "2", "-k", "alpha")
    assert two.rc == 0, two.out
    assert two.executions() == ["alpha@2"]  # alpha@1 is the K=1 run's row, carried
    assert sorted(two.latest) == ["alpha@1", "alpha@2"]
    assert two.manifest["extra"]["resume_selection"] == {
        "ancestor_selected": 4,
        "selected": 2,
        "added": 0,
        "left_out": 2,
    }
