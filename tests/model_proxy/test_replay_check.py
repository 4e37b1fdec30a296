"""``harness replay-check`` in process (the Docker run is in test_replay_runs): the arguments
given again, the verdict of an instance from the rows, the records' index and the replay's
report, and a run root from someone else that tries to make it import a module of its own."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.core.fsutil import atomic_write_json
from harness.core.models import Outcome, TaskRow
from harness.model_proxy.replay_check import (
    ReplayArgsError,
    check_instance,
    loading_argument,
    replay_args,
    replay_check_command,
)
from harness.model_proxy.tape import (
    REPORT_NAME,
    ReplayMiss,
    ReplayReport,
    ReplayServed,
    TapeCall,
    TapeConfig,
    TapeIndex,
    index_path,
)
from harness.run.ledger import LedgerWriter, instance_dir
from harness.run.manifest import new_manifest, read_manifest, write_manifest

PYTEST = [sys.executable, "-m", "pytest"]


def test_the_run_is_given_again_without_its_root_tape_or_upstream() -> None:
    argv = [
        *PYTEST,
        "-p",
        "no:cacheprovider",
        "-q",
        "benchmarks/x",
        "--run-root",
        "/r",
        "--model-record=/rec",
        "--model-upstream",
        "http://u",
        "--model-key-env",
        "K",
        "-k",
        "calc",
        "-rA",
        "--agent",
        "command",
    ]
    assert replay_args(argv, []) == [
        "-p",
        "no:cacheprovider",
        "-q",
        "benchmarks/x",
        "-k",
        "calc",
        "-rA",
        "--agent",
        "command",
    ]
    resumed = replay_args(
        [*PYTEST, "benchmarks/x", "--resume-from", "/old"], ["b/t1@1", "b/t1@2", "b/t2"]
    )
    assert resumed == ["benchmarks/x", "--instance", "t1", "--instance", "t2"]


@pytest.mark.parametrize(
    "args",
    [
        ["-c", "/elsewhere/evil.ini"],
        ["-qc", "evil.ini"],
        ["-cevil.ini"],
        ["--config-file=e.ini"],
        ["--rootdir", "/tmp"],
        ["--confcutdir=/"],
        ["-o", "pythonpath=/tmp"],
        ["-xo", "addopts=-pevil"],
        ["--override-ini=addopts=-pevil"],
        ["@/elsewhere/args.txt"],
        ["-q", "benchmarks/x", "-c", "evil.ini", "-k", "x"],
    ],
)
def test_an_argument_that_reads_a_file_of_the_run_or_looks_elsewhere_is_refused(
    args: list[str],
) -> None:
    assert loading_argument(args) is not None
    with pytest.raises(ReplayArgsError, match="makes pytest read a file the run names"):
        replay_args([*PYTEST, *args], [])


@pytest.mark.parametrize(
    "args",
    [
        ["-p", "no:cacheprovider"],
        ["-pno:anyio"],
        ["-W", "ignore::pytest.PytestAssertRewriteWarning"],  # what the test suite passes
        ["-k", "co"],
        ["-kco"],
        ["-pco"],
        ["-m", "not slow"],
        ["-rA"],
        ["-vv", "-x", "-n", "2"],
        ["--agent-command", "python -c 'print(1)'"],
    ],
)
def test_ordinary_arguments_pass(args: list[str]) -> None:
    assert loading_argument(args) is None


def test_an_argv_that_is_not_a_pytest_session_is_refused() -> None:
    for argv in (["/bin/sh", "-c", "id"], [sys.executable, "-m", "evil"], ["pytest"]):
        with pytest.raises(ReplayArgsError, match="does not start with"):
            replay_args(argv, [])


def _foreign_run(tmp_path: Path, argv: list[str], cwd: Path) -> tuple[Path, Path, Path]:
    """A run root (one row) whose manifest names ``argv`` and ``cwd``, its records, and a
    file the run's code would write if it ran."""
    run = tmp_path / "run"
    run.mkdir()
    manifest = new_manifest(run_id="r", run_root=run, dry_run=False, workers=1, argv=argv)
    manifest.cwd = str(cwd)
    write_manifest(manifest, run)
    row = TaskRow(
        ts_unix=1.0,
        run_id="r",
        benchmark="b",
        instance_id="x",
        status="completed",
        outcome=Outcome.SCORED,
        score=1.0,
    )
    LedgerWriter(run).append(row)
    records = tmp_path / "records"
    TapeConfig("record", records).prepare()
    return run, records, tmp_path / "pwned"


def _evil(mark: Path) -> str:
    return f"open({str(mark)!r}, 'w').write('x')\n"


def test_a_foreign_run_root_cannot_bring_the_code_it_is_checked_with(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run root whose manifest points pytest at a configuration it brings (adding a
    plugin of its own), or runs pytest inside itself (its own conftest): refused before
    any process starts (the code would have left its mark)."""
    home = tmp_path / "checkout"
    home.mkdir()
    run, records, mark = _foreign_run(tmp_path, [*PYTEST, "-q", "-c", "x", "tests"], home)
    (run / "evil_plugin.py").write_text(_evil(mark))
    (run / "evil.ini").write_text(f"[pytest]\npythonpath = {run}\naddopts = -p evil_plugin\n")
    manifest = read_manifest(run)
    manifest.argv = [*PYTEST, "-q", "-c", str(run / "evil.ini"), "tests"]
    write_manifest(manifest, run)
    out = tmp_path / "check"
    rc = replay_check_command([str(run), "--records", str(records), "--output", str(out)])
    assert rc == 2
    assert f"'-c {run / 'evil.ini'}', which makes pytest read a file" in capsys.readouterr().err
    assert not mark.exists() and not out.exists()

    (run / "conftest.py").write_text(_evil(mark))
    manifest.argv, manifest.cwd = [*PYTEST, "-q", "."], str(run)
    write_manifest(manifest, run)
    rc = replay_check_command([str(run), "--records", str(records), "--output", str(out)])
    assert rc == 2
    assert "is inside the run root: a run root cannot bring the code" in capsys.readouterr().err
    assert not mark.exists() and not out.exists()


def _row(score: float | None, sha: str) -> TaskRow:
    return TaskRow(
        ts_unix=1.0,
        run_id="r",
        benchmark="b",
        instance_id="x",
        status="completed",
        outcome=Outcome.SCORED,
        score=score,
        details={"submission": {"sha256": "raw", "sha256_scored": sha}},
    )


def _call(position: int, record: str) -> TapeCall:
    return TapeCall(
        position=position,
        key=f"k{position}",
        record=record,
        method="POST",
        route="chat/completions",
        stream=False,
        status=200,
    )


def _served(position: int, record: str) -> ReplayServed:
    return ReplayServed(
        position=position, key=f"k{position}", record=record, recorded_position=position
    )


def test_the_verdicts(tmp_path: Path) -> None:
    records, replay = tmp_path / "records", tmp_path / "replay"
    atomic_write_json(
        index_path(records, "b", "x"),
        TapeIndex(
            benchmark="b", instance_id="x", recorded_at="t", calls=[_call(1, "r1"), _call(2, "r2")]
        ),
    )
    report_path = instance_dir(replay, "b", "x") / REPORT_NAME

    def verdict(
        report: ReplayReport | None, replayed: TaskRow | None, recorded: TaskRow | None = None
    ) -> tuple[str, int | None, str]:
        report_path.unlink(missing_ok=True)
        if report is not None:
            atomic_write_json(report_path, report)
        got = check_instance("b/x", recorded or _row(1.0, "s"), replayed, replay, records)
        assert (got.recorded_calls, got.recorded_sha256) == (2, "s")  # the scored archive's
        return got.verdict, got.first_differing_call, got.detail

    def report(*served: ReplayServed, misses: list[ReplayMiss] | None = None) -> ReplayReport:
        return ReplayReport(
            records=str(records),
            order="strict",
            benchmark="b",
            instance_id="x",
            recorded_calls=2,
            recording_complete=True,
            calls=len(served) + len(misses or []),
            served=list(served),
            misses=misses or [],
        )

    same = report(_served(1, "r1"), _served(2, "r2"))
    assert verdict(same, _row(1.0, "s"))[:2] == ("identical", None)
    assert verdict(None, None)[0] == "not_run"
    found = verdict(
        report(
            _served(1, "r1"),
            misses=[
                ReplayMiss(
                    position=2, key="k", reason="no record of this request", first_difference="d"
                )
            ],
        ),
        _row(0.0, "t"),
    )
    assert found == ("miss", 2, "no record of this request; first difference: d")
    # the same calls, another outcome: the environment changed the result
    kind, first, detail = verdict(same, _row(0.0, "s"))
    assert (kind, first) == ("diverged", None) and "the environment" in detail
    # another record served at call 2 (a sequence replay), or a call more than recorded
    assert verdict(report(_served(1, "r1"), _served(2, "r1")), _row(1.0, "s"))[:2] == (
        "diverged",
        2,
    )
    assert verdict(report(_served(1, "r1"), _served(2, "r2"), _served(3, "r1")), _row(1.0, "s"))[
        :2
    ] == ("diverged", 3)
    # a row that failed with replay_miss without a report
    missed = _row(None, "s").model_copy(update={"reason_code": "replay_miss"})
    assert verdict(None, missed)[0] == "miss"


def test_a_resumed_run_is_rebuilt_from_the_model_with_what_it_inherited(tmp_path: Path) -> None:
    """Issue 41: a resume of a K=2 fixture run is replayed with the settings it inherited
    (--pb-fixtures, the agent, K=2), on exactly the units it ran (not the carried one)."""
    from harness.model_proxy.replay_check import executed_units, rebuild_args

    first = new_manifest(run_id="r1", run_root=tmp_path / "r1", argv=[
        *PYTEST, "-W", "ignore::pytest.PytestAssertRewriteWarning", "benchmarks/programbench",
        "benchmarks/programbench/test_programbench.py::test_programbench",
        "--pb-fixtures", "-k", "calc", "--attempts", "2",
        "--agent", "command", "--agent-command", "x", "--run-root", "/r1"], dry_run=False,
        workers=0)
    resumed = new_manifest(run_id="r2", run_root=tmp_path / "r2", argv=[
        *PYTEST, "benchmarks/programbench", "--resume-from", "/r1"], dry_run=False, workers=0)
    resumed.extra.attempts = 2
    units = ["programbench/t.a@1", "programbench/t.a@2"]
    resumed.selection.instance_ids = units
    rows = {units[0]: TaskRow(ts_unix=1.0, run_id="r2", benchmark="programbench",
                              instance_id="t.a@1", status="skipped", outcome=Outcome.CARRIED,
                              attempt=1, carried_from="r1"),
            units[1]: TaskRow(ts_unix=1.0, run_id="r2", benchmark="programbench",
                              instance_id="t.a@2", status="completed", outcome=Outcome.SCORED,
                              attempt=1, score=1.0)}
    ran = executed_units(resumed, rows)
    assert ran == ["programbench/t.a@2"]  # the carried attempt is not replayed
    args = rebuild_args([resumed, first], ran)
    assert args == ["-W", "ignore::pytest.PytestAssertRewriteWarning",  # a value, not a node
                    "benchmarks/programbench", "--pb-fixtures", "--agent", "command",
                    "--agent-command", "x", "--instance", "t.a", "--attempts", "2",
                    "-k", "t.a@2"]
