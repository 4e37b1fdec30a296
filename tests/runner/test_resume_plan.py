"""The resume plan (harness.run.resume) on run roots written with the runner's own manifest
and ledger writers: which instances run again, with which attempt number, and which
ancestries are refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.core.models import Outcome, ShardSpec
from harness.run.ledger import LedgerWriter, ledger_path, read_ledger
from harness.run.manifest import manifest_path
from harness.run.resume import (
    ResumeError,
    carry_row,
    check_generations,
    plan_resume,
    walk_ancestry,
)
from tests.runner.runner_support import BENCH, CONFIG, row, write_run

pytestmark = pytest.mark.usefixtures("no_git")

IDS = ["a", "b", "c", "d", "e", "f"]
VERSIONS = {BENCH: "1.0"}


def resume(root: Path, *, config: dict[str, Any] | None = None,
           versions: dict[str, str] | None = None, shard: ShardSpec | None = None,
           shard_given: bool = False) -> Any:
    return plan_resume(root, config=dict(CONFIG if config is None else config),
                       benchmark_versions=versions or VERSIONS, shard=shard,
                       shard_given=shard_given)


def key(iid: str) -> str:
    return f"{BENCH}/{iid}"


def first_run(tmp_path: Path) -> Path:
    return write_run(tmp_path / "r1", run_id="r1", selection=IDS, rows=[
        row("a", Outcome.SCORED, run_id="r1"),
        row("b", Outcome.AGENT_FAILED, run_id="r1"),
        row("c", Outcome.INFRA_FAILED, run_id="r1"),
        row("d", Outcome.BLOCKED, run_id="r1"),
        row("e", Outcome.SCORED, run_id="r1", official_eval_status="pending"),
        # f: no row (the run was killed before it started)
    ])


def test_settled_instances_are_carried_and_the_rest_run_again(tmp_path: Path) -> None:
    plan = resume(first_run(tmp_path))
    assert sorted(plan.carried) == [key("a"), key("b")]  # a verdict, the model's or the scorer's
    assert plan.selection == [key(i) for i in IDS]  # the frozen selection, in order
    to_run = [k for k in plan.selection if k not in plan.carried]
    assert to_run == [key("c"), key("d"), key("e"), key("f")]
    assert plan.attempts == {key("c"): 2, key("d"): 2, key("e"): 2}  # f: first attempt
    assert plan.generation == 1 and plan.ancestor_roots == [str((tmp_path / "r1").resolve())]


def test_the_last_row_of_an_instance_decides(tmp_path: Path) -> None:
    root = write_run(tmp_path / "r1", run_id="r1", selection=["a", "b"], rows=[
        row("a", Outcome.INFRA_FAILED, run_id="r1"),
        row("a", Outcome.SCORED, run_id="r1"),  # rescored at session end
        row("b", Outcome.SCORED, run_id="r1"),
        row("b", Outcome.INFRA_FAILED, run_id="r1"),
    ])
    assert sorted(resume(root).carried) == [key("a")]


def test_a_chain_of_resumes_carries_forward_and_counts_attempts(tmp_path: Path) -> None:
    """r3 resumes r2 which resumed r1: an instance settled anywhere is carried once (with the
    run that settled it), an instance that failed twice runs a third time."""
    r1 = first_run(tmp_path)
    p1 = resume(r1)
    r2_rows = [carry_row(p1.carried[key("a")], run_id="r2", worker="controller", nodeid=None,
                         status="carried_forward", ts_unix=2.0),
               row("c", Outcome.SCORED, run_id="r2", attempt=2),
               row("d", Outcome.INFRA_FAILED, run_id="r2", attempt=2)]
    r2 = write_run(tmp_path / "r2", run_id="r2", selection=IDS, rows=r2_rows, ancestors=[r1],
                   generation=1, source="ancestor")
    plan = resume(r2)
    assert [p.name for p in plan.ancestry.roots] == ["r2", "r1"]
    assert plan.generation == 2
    assert sorted(plan.carried) == [key("a"), key("b"), key("c")]
    assert plan.carried[key("a")].carried_from == "r1"  # not "r2": where it was settled
    assert plan.carried[key("a")].details["run"]["carried_outcome"] == "scored"
    assert plan.carried[key("c")].carried_from == "r2"
    assert plan.attempts[key("d")] == 3 and plan.attempts[key("e")] == 2
    assert key("f") not in plan.attempts


def test_the_row_a_resume_writes_for_a_carried_instance(tmp_path: Path) -> None:
    carried = resume(first_run(tmp_path)).carried[key("b")]
    written = carry_row(carried, run_id="r2", worker="controller", nodeid="n", status="x",
                        ts_unix=5.0)
    assert (written.outcome, written.reason_code, written.run_id, written.carried_from) == \
        (Outcome.CARRIED, "settled_in_ancestor", "r2", "r1")
    assert written.details["run"]["carried_outcome"] == "agent_failed" and written.settled
    assert written.duration_s == 0.0  # carrying takes no time (and gives --durations-from none)


def test_a_changed_option_is_refused_and_named(tmp_path: Path) -> None:
    root = first_run(tmp_path)
    with pytest.raises(ResumeError, match=r"differs in agent\.model, timeout") as info:
        resume(root, config={**CONFIG, "agent.model": "other", "timeout": 61})
    assert info.value.reason == "config_mismatch"
    with pytest.raises(ResumeError, match="differs in runtime"):  # given then, not now
        resume(write_run(tmp_path / "r0", run_id="r0", selection=IDS,
                         config={**CONFIG, "runtime": "runsc"}))


def test_options_that_do_not_change_results_are_not_compared(tmp_path: Path) -> None:
    """A retired key in an old manifest, and the agent of a dry run (nothing ran)."""
    old = write_run(tmp_path / "old", run_id="old", selection=IDS,
                    config={**CONFIG, "programbench.eval": "batch"})
    assert resume(old).selection
    dry = write_run(tmp_path / "dry", run_id="dry", selection=IDS, dry_run=True,
                    config={**CONFIG, "agent.model": "other"})
    assert resume(dry).selection
    with pytest.raises(ResumeError, match="timeout"):  # but not every key of a dry run
        resume(dry, config={**CONFIG, "agent.model": "other", "timeout": 1})


def test_another_benchmark_version_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ResumeError, match=f"benchmark version differs for {BENCH}") as info:
        resume(first_run(tmp_path), versions={BENCH: "2.0"})
    assert info.value.reason == "benchmark_version_mismatch"


def test_the_shard_is_frozen(tmp_path: Path) -> None:
    root = write_run(tmp_path / "s", run_id="s", selection=IDS, shard=ShardSpec(index=2, count=4))
    assert resume(root).shard == ShardSpec(index=2, count=4)  # no --shard: the ancestor's
    assert resume(root, shard=ShardSpec(index=2, count=4), shard_given=True).shard.count == 4
    with pytest.raises(ResumeError, match="differs from the ancestor's shard 2/4") as info:
        resume(root, shard=ShardSpec(index=1, count=4), shard_given=True)
    assert info.value.reason == "shard_mismatch"


def test_an_ancestry_cycle_is_refused(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write_run(a, run_id="a", selection=IDS, ancestors=[b])
    write_run(b, run_id="b", selection=IDS, ancestors=[a])
    with pytest.raises(ResumeError, match="cycle") as info:
        walk_ancestry(a)
    assert info.value.reason == "ancestry_cycle"


@pytest.mark.parametrize(("damage", "reason"), [
    ("ancestor_gone", "ancestor_missing"),
    ("no_manifest", "ancestor_manifest"),
    ("bad_manifest", "ancestor_manifest"),
    ("no_ledger", "ancestor_ledger_missing"),
    ("bad_ledger", "ancestor_ledger_corrupt"),
])
def test_a_damaged_ancestor_is_refused(tmp_path: Path, damage: str, reason: str) -> None:
    r1 = first_run(tmp_path)
    r2 = write_run(tmp_path / "r2", run_id="r2", selection=IDS, ancestors=[r1], generation=1)
    if damage == "ancestor_gone":
        r1.rename(tmp_path / "moved")
    elif damage == "no_manifest":
        manifest_path(r1).unlink()
    elif damage == "bad_manifest":
        manifest_path(r1).write_text(json.dumps({"run_id": "r1"}))
    elif damage == "no_ledger":
        ledger_path(r1).unlink()
    else:
        lines = ledger_path(r1).read_text().splitlines(keepends=True)
        ledger_path(r1).write_text(lines[0] + "{garbage\n" + "".join(lines[1:]))
    with pytest.raises(ResumeError) as info:
        resume(r2)
    assert info.value.reason == reason


def test_a_torn_last_line_is_not_damage(tmp_path: Path) -> None:
    """A kill in the middle of a ledger write leaves a torn last line: the instance has no
    row and runs again."""
    r1 = first_run(tmp_path)
    with ledger_path(r1).open("a") as fh:
        fh.write(row("f", Outcome.SCORED, run_id="r1").dump_line()[:40])
    plan = resume(r1)
    assert key("f") not in plan.carried and sorted(plan.carried) == [key("a"), key("b")]
    # issue 41: the torn line was moved aside (recorded), so a later append to that ledger
    # (a rescore of the killed run) starts on a line of its own: no hand edit
    [moved] = plan.ancestry.torn
    assert Path(moved["saved_to"]).read_text() == row("f", Outcome.SCORED,
                                                     run_id="r1").dump_line()[:40]
    assert ledger_path(r1).read_bytes().endswith(b"\n")
    LedgerWriter(r1).append(row("g", Outcome.SCORED, run_id="r1"))
    assert [r.instance_id for r in read_ledger(ledger_path(r1)).rows][-1] == "g"
    assert resume(r1).ancestry.torn == []  # nothing torn any more


def test_an_append_after_a_crash_sets_the_torn_line_aside(tmp_path: Path) -> None:
    r1 = first_run(tmp_path)
    whole = ledger_path(r1).read_bytes()
    with ledger_path(r1).open("a") as fh:
        fh.write('{"ts_unix": 1.0, "run_')
    writer = LedgerWriter(r1)
    assert writer.torn_set_aside is not None and writer.torn_set_aside["bytes"] == 22
    writer.append(row("h", Outcome.SCORED, run_id="r1"))
    assert ledger_path(r1).read_bytes().startswith(whole)
    assert read_ledger(ledger_path(r1)).rows[-1].instance_id == "h"


def test_recoveries_are_counted_and_refused_past_the_limit(tmp_path: Path) -> None:
    """r2 and r3 each re-ran what failed (their selection is the ancestor's): a resume of r3
    is the third recovery."""
    r1 = first_run(tmp_path)
    r2 = write_run(tmp_path / "r2", run_id="r2", selection=IDS, ancestors=[r1], generation=1,
                   source="ancestor", rows=[row("c", Outcome.INFRA_FAILED, run_id="r2",
                                                attempt=2)])
    r3 = write_run(tmp_path / "r3", run_id="r3", selection=IDS, ancestors=[r2], generation=2,
                   source="ancestor")
    plan = resume(r3)
    assert plan.recovery_generation == 3
    check_generations(plan, remaining=4, max_generations=3)
    with pytest.raises(ResumeError, match="recovery generation 3 with 4 instance") as info:
        check_generations(plan, remaining=4, max_generations=2)
    assert info.value.reason == "max_recovery_generations"
    check_generations(plan, remaining=0, max_generations=1)  # nothing left to run: no refusal


def test_a_resume_that_grew_the_selection_starts_a_new_stage(tmp_path: Path) -> None:
    """A gate run over a few instances, grown to the whole benchmark by a resume with its own
    selectors: the recoveries of the grown run count from 1 again."""
    gate = write_run(tmp_path / "gate", run_id="gate", selection=IDS[:2])
    grown = write_run(tmp_path / "grown", run_id="grown", selection=IDS, ancestors=[gate],
                      generation=1, extra={"resume_selection": {"added": 4}})
    assert resume(grown).recovery_generation == 1
    same = write_run(tmp_path / "same", run_id="same", selection=IDS[:2], ancestors=[gate],
                     generation=1, extra={"resume_selection": {"added": 0}})
    assert resume(same).recovery_generation == 2
