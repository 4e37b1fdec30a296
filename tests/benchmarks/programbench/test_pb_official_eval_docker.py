"""The official CLI on real Docker, with the offline fixture: verdicts a user relies on."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.fixture import FixturePaths
from benchmarks.programbench.official_eval import (
    RESULT_NAME,
    OfficialEvalResult,
    evaluate_batch,
    evaluate_instance,
    run_info,
)
from tests.benchmarks.programbench.pb_support import make_run

pytestmark = pytest.mark.docker
OTHER = "abishekvashok__cmatrix.5c082c6"  # its image is not on this machine


def test_bundled_correct_submission_scores_1(pb_fixture: FixturePaths, tmp_path: Path) -> None:
    info = make_run(tmp_path / "src", Path(pb_fixture.oracle_dir))
    assert info.file_count == 2 and info.has_compile_sh
    result = evaluate_instance(tmp_path / "src", FIXTURE_ID, blob_dir=pb_fixture.blob_dir)
    assert result.official_eval_status == "completed", result.error_message
    assert result.score == 1.0 and result.resolved is True and result.near_resolved is True
    assert (result.tests_passed, result.tests_total) == (3, 3)
    assert result.executable_hash is not None and result.executable_hash.startswith("2ad9bd64")
    folder = tmp_path / "src" / FIXTURE_ID
    assert OfficialEvalResult.model_validate_json((folder / RESULT_NAME).read_text()) == result
    assert (folder / f"{FIXTURE_ID}.eval.json").exists()
    assert "Evaluation Summary" in Path(str(result.stdout_path)).read_text()
    assert "✅" in run_info(tmp_path / "src")


def test_bundled_incorrect_submission_scores_0(pb_fixture: FixturePaths, tmp_path: Path) -> None:
    make_run(tmp_path / "src", Path(pb_fixture.incorrect_dir))
    result = evaluate_instance(tmp_path / "src", FIXTURE_ID, blob_dir=pb_fixture.blob_dir)
    assert result.official_eval_status == "completed"
    assert result.score == 0.0 and result.resolved is False
    assert (result.tests_passed, result.tests_total) == (0, 3)


def test_do_nothing_workspace_scores_0_not_an_error(
    pb_fixture: FixturePaths, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    (ws / ".git").mkdir(parents=True)
    (ws / "README.md").write_text("# calculator\n")
    info = make_run(tmp_path / "src", ws)
    assert not info.has_compile_sh
    result = evaluate_instance(tmp_path / "src", FIXTURE_ID, blob_dir=pb_fixture.blob_dir)
    assert result.official_eval_status == "completed"
    assert result.score == 0.0 and result.error_code == "compile_failed"
    assert result.tests_total == 3


def test_missing_image_is_an_error_with_the_message_not_a_zero(
    pb_fixture: FixturePaths, tmp_path: Path
) -> None:
    make_run(tmp_path / "src", Path(pb_fixture.oracle_dir))
    stale = tmp_path / "src" / FIXTURE_ID / f"{FIXTURE_ID}.eval.json"
    stale.write_text(json.dumps({"test_results": []}))  # an old verdict must not be re-read
    result = evaluate_instance(
        tmp_path / "src", FIXTURE_ID, blob_dir=pb_fixture.blob_dir, image_tag="harness-missing-tag"
    )
    assert result.official_eval_status == "error"
    assert result.score is None and result.resolved is None
    assert result.error_code == "RuntimeError"
    assert result.error_message is not None and "harness-missing-tag" in result.error_message
    assert "Failed to start container" in result.error_message
    assert not stale.exists()


def test_batch_one_cli_call_many_verdicts(pb_fixture: FixturePaths, tmp_path: Path) -> None:
    src = tmp_path / "src"
    make_run(src, Path(pb_fixture.oracle_dir))
    make_run(src, Path(pb_fixture.oracle_dir), instance_id=OTHER)
    results = evaluate_batch(src, blob_dir=pb_fixture.blob_dir, workers=2)
    assert set(results) == {FIXTURE_ID, OTHER}
    assert results[FIXTURE_ID].score == 1.0
    other = results[OTHER]
    assert other.official_eval_status == "error" and other.score is None
    assert other.error_message is not None and "cmatrix" in other.error_message
    assert results[FIXTURE_ID].cmd == other.cmd  # one call
    assert (src / OTHER / RESULT_NAME).exists()


def test_blob_has_the_fixed_run_sh(pb_fixture: FixturePaths) -> None:
    blob = Path(pb_fixture.blob_dir) / FIXTURE_ID / "tests" / "33128f6b8600.tar.gz"
    with tarfile.open(blob, "r:gz") as tar:
        names = sorted(m.name for m in tar.getmembers())
        run_sh = tar.extractfile("eval/run.sh").read().decode()  # type: ignore[union-attr]
    assert names == ["eval/run.sh", "eval/tests/test_calculator.py"]
    assert "--rootdir=eval eval/tests/" in run_sh


def test_timeout_is_an_error_and_leaves_no_container(
    pb_fixture: FixturePaths, tmp_path: Path
) -> None:
    import subprocess

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "compile.sh").write_text("#!/bin/bash\nsleep 60\n")
    make_run(tmp_path / "src", ws)
    result = evaluate_instance(
        tmp_path / "src", FIXTURE_ID, blob_dir=pb_fixture.blob_dir, timeout_s=4
    )
    assert result.official_eval_status == "error" and result.error_code == "timeout"
    assert result.score is None
    assert not (tmp_path / "src" / FIXTURE_ID / f"{FIXTURE_ID}.eval.json").exists()
    assert result.docker_policy is not None and result.docker_policy.containers_created == 1
    label = f"harness.pb_eval={result.docker_policy.label}"  # this eval call's containers
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={label}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert not left, f"containers left behind: {left}"
