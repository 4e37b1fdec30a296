"""``harness programbench rescore RUN --ignored-tests FILE`` on a real run of the offline
fixture tasks (oracle agent, the real ``programbench eval`` in real Docker): new scores from
the kept eval.json files, checked against an independent reading of those files with the
registry's rule; a row per changed instance, none the second time."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from benchmarks.programbench.fixture_tasks import EXTRA_TASKS
from benchmarks.programbench.ignored_rescore import (
    RULE_DEDUPE,
    RescoreRefused,
    rescore_command,
    rescore_run,
)
from benchmarks.programbench.official_eval import DuplicateRecords, score_eval_json
from harness.core.models import Outcome, TaskRow
from harness.run.ledger import LedgerWriter, ledger_path, read_ledger
from harness.run.manifest import read_manifest
from harness.sandbox.cleanup import run_lock
from tests.benchmarks.programbench.pb_resume import resume_of
from tests.support.suite import run_pytest

# slow tier: a minute or more each on this engine (CI runs it after the default tier)
pytestmark = [pytest.mark.docker, pytest.mark.slow]

CALCFLOAT = EXTRA_TASKS[0]  # 0.75: test_decimals fails
WORDCOUNT = EXTRA_TASKS[1]  # 0.0
DECIMALS = f"{CALCFLOAT.branch}/tests.test_calcfloat.test_decimals"


@pytest.fixture(scope="module")
def fixture_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rescore") / "run"
    run = run_pytest("benchmarks/programbench", root, "--pb-fixtures", "--agent", "oracle")
    assert run.rc == 0, run.out
    return root


def copy_run(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest, symlinks=True)
    return dest


def latest(run: Path) -> dict[str, TaskRow]:
    return {r.instance_id: r for r in read_ledger(ledger_path(run)).latest.values()}


def registry_score(eval_json: Path, ignore: list[str]) -> float:
    """The registry's rule read straight from eval.json (no programbench code): passed over
    the "<branch>/<name>" results left after the ignore list (the fixture tasks have one
    active branch and no ignored tests of their own)."""
    results = json.loads(eval_json.read_text())["test_results"]
    kept = [t["status"] == "passed" for t in results if f"{t['branch']}/{t['name']}" not in ignore]
    return sum(kept) / len(kept) if kept else 0.0


def test_rescore_changes_the_ignored_instances_once(
    fixture_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = copy_run(fixture_run, tmp_path / "run")
    before = latest(run)
    assert {i: r.score for i, r in before.items()} == {
        "testorg__calculator.abc1234": 1.0,
        CALCFLOAT.instance_id: 0.75,
        WORDCOUNT.instance_id: 0.0,
    }
    ignored = {
        CALCFLOAT.instance_id: [DECIMALS],
        WORDCOUNT.instance_id: ["tests.test_wordcount.test_counts_words"],  # no branch: no match
        "absent__task.1234567": ["x/y"],
    }
    file = tmp_path / "ignored_tests.json"
    file.write_text(json.dumps(ignored))
    lines = len(ledger_path(run).read_text().splitlines())

    assert rescore_command([str(run), "--ignored-tests", str(file)]) == 0
    out = capsys.readouterr().out
    assert f"{CALCFLOAT.instance_id}  " in out and "0.7500 (3/4)" in out and "1.0000 (3/3) *" in out
    assert "1 ignored name(s) matched no test" in out
    assert "1 changed (*): appended 1 ledger row(s)" in out

    rows = read_ledger(ledger_path(run)).rows
    assert len(rows) == lines + 1
    new = rows[-1]
    assert new.instance_id == CALCFLOAT.instance_id and new.run_id == read_manifest(run).run_id
    assert (new.score, new.tests_passed, new.tests_total) == (1.0, 3, 3)
    assert new.resolved is True and new.near_resolved is True and new.reason_code == "resolved"
    rule = new.details["eval"]["rescore"]
    assert rule["ignored_tests_sha256"] == hashlib.sha256(file.read_bytes()).hexdigest()
    assert rule["ignored"] == [DECIMALS] and rule["unmatched"] == []
    assert (rule["old_score"], rule["new_score"]) == (0.75, 1.0)
    # the instance folder's own copy of the ledger has it too; the eval.json is untouched
    folder = run / "programbench" / CALCFLOAT.instance_id
    assert json.loads((folder / "result_index.jsonl").read_text().splitlines()[-1])["score"] == 1.0
    for iid, row in latest(run).items():
        eval_json = run / row.output_paths["eval_json"]
        assert row.score == registry_score(eval_json, ignored.get(iid, [])), iid
        assert eval_json.read_bytes() == (fixture_run / row.output_paths["eval_json"]).read_bytes()

    # issue 41: the manifest's figures and the report follow the ledger
    manifest = read_manifest(run)
    assert manifest.mean_score == pytest.approx((1.0 + 1.0 + 0.0) / 3)
    assert manifest.extra.figures_refreshed and "rescore" in str(manifest.extra.figures_refreshed)
    report = json.loads((run / "report" / "report.json").read_text())
    assert report["headline"]["raw"]["mean_score"] == pytest.approx(manifest.mean_score)

    # the same file again: nothing changes, nothing is written
    assert rescore_command([str(run), "--ignored-tests", str(file)]) == 0
    assert "0 changed (*): appended 0 ledger row(s)" in capsys.readouterr().out
    assert len(read_ledger(ledger_path(run)).rows) == lines + 1

    # an empty map (the registry today): back to the official scores, one row again
    file.write_text("{}")
    results = {r.instance_id: r for r in rescore_run(run, file)}
    assert (
        results[CALCFLOAT.instance_id].changed and results[CALCFLOAT.instance_id].new_score == 0.75
    )
    assert sum(r.changed for r in results.values()) == 1
    assert latest(run)[CALCFLOAT.instance_id].reason_code == "unresolved"


def test_a_carried_instance_is_rescored_from_the_run_that_scored_it(
    fixture_run: Path, tmp_path: Path
) -> None:
    """A resume's carried row has no eval.json in its own folder: the ancestor's is read."""
    ancestor = copy_run(fixture_run, tmp_path / "ancestor")
    resumed = tmp_path / "resumed"
    rows = resume_of(ancestor, resumed, latest(ancestor).values())
    assert all(r.outcome is Outcome.CARRIED for r in rows)
    assert not (resumed / "programbench" / CALCFLOAT.instance_id / "submission.tar.gz").exists()
    file = tmp_path / "ignored.json"
    file.write_text(json.dumps({CALCFLOAT.instance_id: [DECIMALS]}))
    results = {r.instance_id: r for r in rescore_run(resumed, file)}
    assert [i for i, r in results.items() if r.changed] == [CALCFLOAT.instance_id]
    row = latest(resumed)[CALCFLOAT.instance_id]
    assert row.score == 1.0 and row.outcome is Outcome.CARRIED and row.carried_from
    assert row.details["eval"]["rescore"]["eval_json"].startswith(str(ancestor.resolve()))
    assert len(read_ledger(ledger_path(ancestor)).rows) == len(rows)  # the ancestor is untouched


def test_a_running_run_and_a_foreign_file_are_refused(fixture_run: Path, tmp_path: Path) -> None:
    run = copy_run(fixture_run, tmp_path / "run")
    file = tmp_path / "ignored.json"
    file.write_text(json.dumps({CALCFLOAT.instance_id: [DECIMALS]}))
    with run_lock(run).acquire(timeout=0), pytest.raises(RescoreRefused, match="still running"):
        rescore_run(run, file)
    file.write_text(json.dumps({CALCFLOAT.instance_id: 0.5}))  # the legacy per-instance form
    with pytest.raises(RescoreRefused, match=r"not the registry's ignored_tests\.json format"):
        rescore_run(run, file)
    assert rescore_command([str(run), "--ignored-tests", str(file)]) == 2


def test_dedupe_records_rescores_an_inflated_score_once(
    fixture_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 45: an old run scored under a grader whose rerun plugin wrote a record per
    rerun (pytest-rerunfailures 16.6.1: a bare ``<testcase/>``, read as a pass) is rescored
    with each test's last record; the report says which instance changed and why."""
    run = copy_run(fixture_run, tmp_path / "run")
    row = latest(run)[CALCFLOAT.instance_id]
    eval_json = run / row.output_paths["eval_json"]
    data = json.loads(eval_json.read_text())
    failing = next(t for t in data["test_results"] if f"{t['branch']}/{t['name']}" == DECIMALS)
    assert failing["status"] != "passed"
    at = data["test_results"].index(failing)  # two reruns recorded before the final failure
    data["test_results"][at:at] = [{**failing, "status": "passed"} for _ in range(2)]
    eval_json.write_text(json.dumps(data))
    from programbench.eval.eval import EvaluationResult  # the old grader's own figure

    inflated = float(EvaluationResult.model_validate_json(eval_json.read_text()).score)
    assert inflated == pytest.approx(5 / 6)
    old = row.model_copy(update={"score": inflated, "tests_passed": 5, "tests_total": 6,
                                 "resolved": False, "near_resolved": False})
    assert LedgerWriter(run).append(old)  # as the run recorded it then

    assert rescore_command([str(run), "--dedupe-records"]) == 0
    out = capsys.readouterr().out
    assert "with duplicate test records removed" in out
    assert "0.8333 (5/6)" in out and "0.7500 (3/4) *" in out
    assert "1 changed (*): appended 1 ledger row(s)" in out
    new = latest(run)[CALCFLOAT.instance_id]
    assert (new.score, new.tests_passed, new.tests_total) == (0.75, 3, 4)
    rule = new.details["eval"]["rescore"]
    assert rule["rule"] == RULE_DEDUPE and rule["duplicates_removed"] == 2
    assert rule["ignored_tests_file"] is None
    html = (run / "report" / "report.html").read_text()
    assert "rescored 0.8333" in html and "duplicate records removed" in html
    # a second pass changes nothing; the scorer itself refuses such a file outright
    assert rescore_command([str(run), "--dedupe-records"]) == 0
    assert "0 changed (*)" in capsys.readouterr().out
    with pytest.raises(DuplicateRecords, match="recorded more than once"):
        score_eval_json(CALCFLOAT.instance_id, eval_json)
    assert rescore_command([str(run)]) == 2  # no rule named
    assert "--dedupe-records" in capsys.readouterr().err
