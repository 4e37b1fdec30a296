"""``harness programbench submission`` end to end: a real run (mini-swe-agent driven by a
FAKE scripted model server, the real ``programbench eval`` in real Docker), then the real
``programbench submit package`` and ``submit verify`` on the output.

``submit package`` packages only known, non-fixture instances: it drops every
``testorg__`` id, and every offline fixture task has one. So this module adds one task with
a real-looking id, ``harnessfix__calculator.abc1234`` (the calculator's task.yaml, tests.json
and test branch, under another name), to a private overlay of the installed package: a copy
of its code with ``data/tasks`` holding links to every installed task plus the new one,
first on ``PYTHONPATH`` for the run and the official commands. The installed package is not
changed (other tests count its tasks). The task's image is the offline fixture's, tagged
with the name ``programbench eval`` derives from the id (the tag is removed afterwards);
its blob is the calculator's branch blob under the new id.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.leaderboard import submission_command
from benchmarks.programbench.leaderboard_records import RECORD_NAME, SubmissionRecord
from harness.core.models import TaskRow
from harness.run.ledger import LedgerWriter, ledger_path, read_ledger
from harness.run.manifest import read_manifest, write_manifest
from harness.testing.fake_model_server import start_fake_model_server
from tests.agents.model_scripts import solve_script
from tests.benchmarks.programbench.lb_overlay import Overlay, build_overlay, overlay_id, tagged
from tests.benchmarks.programbench.pb_resume import resume_of
from tests.support.suite import REPO_ROOT, run_env

# slow tier: a minute or more each on this engine (CI runs it after the default tier)
pytestmark = [pytest.mark.docker, pytest.mark.slow]

LB_ID = overlay_id(FIXTURE_ID)  # harnessfix__calculator.abc1234
MODEL = "openai/fake-model"
BRANCH = "33128f6b8600"


def clean_repo(path: Path) -> Path:
    path.mkdir()
    (path / "README").write_text("the agent's source checkout\n")
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    for args in (["init", "-q"], ["add", "README"], ["commit", "-q", "-m", "seed"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    return path


@pytest.fixture(scope="module")
def overlay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Overlay]:
    built = build_overlay(tmp_path_factory.mktemp("overlay"), [FIXTURE_ID])
    with tagged([FIXTURE_ID]):
        yield built


@pytest.fixture(scope="module")
def lb_run(overlay: Overlay, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A reportable run (a clean --agent-repo) of the real-looking task."""
    work = tmp_path_factory.mktemp("lbrun")
    config = work / "agent.yaml"
    prices = work / "prices.json"
    prices.write_text(
        json.dumps({"models": {"fake-model": {"input_per_mtok": 2.0, "output_per_mtok": 10.0}}})
    )
    server = start_fake_model_server(solve_script())
    config.write_text(
        yaml.safe_dump(
            {"model": {"model_kwargs": {"api_base": server.base_url, "api_key": "not-a-key"}}}
        )
    )
    root = work / "run"
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-q",
                "benchmarks/programbench",
                "--run-root",
                str(root),
                "-k",
                "harnessfix",
                "--agent",
                "mini-swe-agent",
                "--solve-model",
                MODEL,
                "--agent-config",
                str(config),
                "--model-prices",
                str(prices),
                "--agent-repo",
                str(clean_repo(work / "agent")),
            ],
            cwd=REPO_ROOT,
            env=run_env(overlay.env()),
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    finally:
        server.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    row = effective(root)
    assert row.score == 1.0 and row.official_eval_status == "completed", row
    assert read_manifest(root).reportable is True
    return root


def effective(run: Path) -> TaskRow:
    return read_ledger(ledger_path(run)).latest[f"programbench/{LB_ID}"]


def copy_run(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest, symlinks=True)
    return dest


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def record_of(out: Path) -> SubmissionRecord:
    return SubmissionRecord.model_validate_json((out / RECORD_NAME).read_text())


def test_the_official_package_and_verify_pass_on_the_output(
    lb_run: Path,
    overlay: Overlay,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PYTHONPATH", overlay.pythonpath)
    out = tmp_path / "20260101_harness_fake-model"
    assert submission_command([str(lb_run), "--output", str(out)]) == 0, capsys.readouterr()
    printed = capsys.readouterr().out
    assert "programbench submit package: ok (exit 0)" in printed
    assert "programbench submit verify (Tier 0): ok (exit 0)" in printed
    record = record_of(out)
    assert record.package and record.package.ok
    assert "Packaged 1 instance(s)" in record.package.stdout_tail
    assert (
        record.verify and record.verify.ok and "1/1 checks consistent" in record.verify.stdout_tail
    )
    assert record.reportable and not record.forced and record.status == "written"

    row, folder = effective(lb_run), lb_run / "programbench" / LB_ID
    (packed,) = record.instances
    assert packed.submission_sha256_verified and packed.source_run == str(lb_run.resolve())
    copied = {f.name: f for f in packed.files}
    # byte copies of what the official eval scored (package then split the eval.json)
    assert (out / LB_ID / "submission.tar.gz").read_bytes() == (
        folder / "submission.tar.gz"
    ).read_bytes()
    assert copied[f"{LB_ID}.eval.json"].sha256 == sha(lb_run / row.output_paths["eval_json"])
    assert (out / LB_ID / f"{LB_ID}.traj.json").read_bytes() == (
        folder / "mini_swe_agent.traj.json"
    ).read_bytes()
    assert (out / LB_ID / f"{LB_ID}.eval.log.json").is_file()  # package's split
    recombined = copy_run(out, tmp_path / "recombined")
    subprocess.run(
        [shutil.which("programbench") or "programbench", "submit", "recombine", str(recombined)],
        env=overlay.env(),
        check=True,
        capture_output=True,
    )
    assert json.loads((recombined / LB_ID / f"{LB_ID}.eval.json").read_text()) == json.loads(
        (lb_run / row.output_paths["eval_json"]).read_text()
    )

    stats = {
        n: json.loads((out / "_stats" / f"{n}.json").read_text())
        for n in ("cost", "calls", "tokens", "score", "languages")
    }
    assert row.cost_known and stats["cost"] == {LB_ID: row.cost_usd}
    assert stats["languages"] == {LB_ID: "sh"}  # issue 45: the registry's rule
    steps = len(solve_script()["responses"])
    assert stats["calls"] == {LB_ID: steps}
    assert row.tokens is not None and stats["tokens"] == {LB_ID: row.tokens.completion} == {
        LB_ID: 100 * steps}
    assert stats["score"] == {
        LB_ID: {
            f"{BRANCH}/tests.test_calculator.test_{n}": True
            for n in ("addition", "subtraction", "multiplication")
        }
    }
    manifest = yaml.safe_load((out / "submission.yaml").read_text())
    assert manifest["submission_id"] == out.name
    assert manifest["system"]["agent"] == "mini-swe-agent" and manifest["system"]["model"] == MODEL
    assert read_manifest(lb_run).run_id in manifest["description"]
    assert "FORCED" not in manifest["description"] and "Unknown" not in manifest["description"]

    # again into the same folder (an earlier output): the author's fields stay
    manifest["submitter"]["name"] = "A. Author"
    (out / "submission.yaml").write_text(yaml.safe_dump(manifest))
    assert submission_command([str(lb_run), "--output", str(out)]) == 0
    again = yaml.safe_load((out / "submission.yaml").read_text())
    assert (
        again["submitter"]["name"] == "A. Author"
        and again["description"] == manifest["description"]
    )
    assert record_of(out).verify.ok  # type: ignore[union-attr]


def test_a_run_that_is_not_reportable_is_packaged_only_with_force_recorded(
    lb_run: Path,
    overlay: Overlay,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PYTHONPATH", overlay.pythonpath)
    run = copy_run(lb_run, tmp_path / "run")
    manifest = read_manifest(run)
    manifest.extra.agent_source = None  # as a run without --agent-repo writes it
    write_manifest(manifest, run)
    out = tmp_path / "out"
    assert submission_command([str(run), "--output", str(out)]) == 2
    assert "is not reportable (no --agent-repo" in capsys.readouterr().err
    assert not out.exists()
    assert submission_command([str(run), "--output", str(out), "--force"]) == 0
    assert "FORCED: not reportable (no --agent-repo" in capsys.readouterr().out
    description = yaml.safe_load((out / "submission.yaml").read_text())["description"]
    assert "FORCED (--force): the run is not reportable: no --agent-repo" in description
    record = record_of(out)
    assert record.forced and not record.reportable and record.verify and record.verify.ok


def test_an_unknown_cost_is_left_out_and_listed_never_zero(
    lb_run: Path,
    overlay: Overlay,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The effective row (the last one) does not know its cost, as an unpriced model leaves it."""
    monkeypatch.setenv("PYTHONPATH", overlay.pythonpath)
    run = copy_run(lb_run, tmp_path / "run")
    row = effective(run)
    details = row.details.model_copy(deep=True)
    details.agent.cost_source = "unknown"
    unpriced = row.model_copy(update={"cost_usd": None, "cost_known": False, "details": details})
    assert LedgerWriter(run).append(unpriced)
    out = tmp_path / "out"
    assert submission_command([str(run), "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert (
        f"unknown cost (left out of _stats/cost.json, not 0): {LB_ID} (cost unknown (unknown))"
        in printed
    )
    assert json.loads((out / "_stats" / "cost.json").read_text()) == {}
    assert json.loads((out / "_stats" / "calls.json").read_text()) == {
        LB_ID: len(solve_script()["responses"])
    }
    record = record_of(out)
    assert [(g.instance_id, g.stat) for g in record.unknown] == [(LB_ID, "cost")]
    description = yaml.safe_load((out / "submission.yaml").read_text())["description"]
    assert f"Unknown cost (left out of _stats/cost.json, not 0): {LB_ID}." in description
    assert record.verify and record.verify.ok


def test_a_carried_instance_comes_from_the_run_that_scored_it(
    lb_run: Path,
    overlay: Overlay,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTHONPATH", overlay.pythonpath)
    ancestor = copy_run(lb_run, tmp_path / "ancestor")
    resumed = tmp_path / "resumed"
    resume_of(ancestor, resumed, [effective(ancestor)])
    out = tmp_path / "out"
    assert submission_command([str(resumed), "--output", str(out)]) == 0
    (packed,) = record_of(out).instances
    assert packed.source_run == str(ancestor.resolve())
    assert packed.carried_from == read_manifest(ancestor).run_id
    assert (out / LB_ID / f"{LB_ID}.traj.json").is_file()

    # a kept archive that is not the scored one is never packaged
    archive = ancestor / "programbench" / LB_ID / "submission.tar.gz"
    archive.write_bytes(archive.read_bytes() + b"\0")
    out2 = tmp_path / "out2"
    assert submission_command([str(resumed), "--output", str(out2)]) == 1  # package: nothing left
    record = record_of(out2)
    assert record.instances == [] and "not the scored" in record.left_out[-1].reason
    assert record.package is not None and not record.package.ok and record.verify is None


def test_an_oversized_trajectory_or_eval_json_is_cut_and_said(
    lb_run: Path,
    overlay: Overlay,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The agent wrote the trajectory and the program's output fills the eval.json: past
    their bounds (here made small), a trajectory is not copied and an eval.json leaves its
    instance out, each said in the output and the record (issue 40)."""
    from benchmarks.programbench import leaderboard, official_eval

    monkeypatch.setenv("PYTHONPATH", overlay.pythonpath)
    monkeypatch.setattr(leaderboard, "MAX_TRAJECTORY_BYTES", 10)
    out = tmp_path / "out"
    assert submission_command([str(lb_run), "--output", str(out)]) == 0
    assert f"cut {LB_ID}.traj.json: " in capsys.readouterr().out
    (packed,) = record_of(out).instances
    assert packed.cut and not (out / LB_ID / f"{LB_ID}.traj.json").exists()
    assert (out / LB_ID / "submission.tar.gz").is_file()  # the rest is packaged
    monkeypatch.setattr(official_eval, "MAX_EVAL_JSON_BYTES", 10)
    again = tmp_path / "again"
    assert submission_command([str(lb_run), "--output", str(again)]) == 1  # nothing left
    assert f"left out {LB_ID}: " in capsys.readouterr().out
    assert [o.instance_id for o in record_of(again).left_out] == [LB_ID]
