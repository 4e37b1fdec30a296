"""Issue 23 item 7 (Cowork's parts): a Cowork resume compares the images its ancestors ran
(the harness's default runtime and PostgreSQL images included) and the harness commit, and
refuses naming the differing fields; a Cowork waiver leaves the run not reportable, named.

The pure comparison is tested in process; the runs are real ``pytest`` sessions (the dry
run needs no Docker; the resume test runs one real oracle task first).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from benchmarks.cowork_bench.resume_check import differences, run_images
from harness.core.models import GitState, Manifest, ManifestExtra, TaskRow, Versions
from tests.benchmarks.cowork.cowork_helpers import FIXTURE
from tests.support.suite import REPO_ROOT, run_pytest

TARGET = "benchmarks/cowork_bench"
FILE_TASK = "excel-sales-summary"
DIRTY_WAIVER = "cowork waiver --cowork-allow-dirty-bench"
TOOLS_WAIVER = "cowork waiver --cowork-allow-missing-tools"
Ancestor = tuple[str, Manifest, list[TaskRow]]


def manifest(root: str, head: str | None, images: dict[str, str] | None = None,
             dry_run: bool = False) -> Manifest:
    extra: dict[str, Any] = {"cowork": {"run_images": images}} if images else {}
    return Manifest(run_id=root, run_root=f"/runs/{root}", created_at_unix=0.0,
                    created_at="1970-01-01T00:00:00+00:00", argv=[], cwd="/",
                    versions=Versions(harness="x", python="3", pytest="9", platform="p"),
                    source=GitState(available=True, head=head), dry_run=dry_run,
                    extra=ManifestExtra.model_validate(extra))


def row(runtime: str, pg: str) -> TaskRow:
    return TaskRow.model_validate({
        "run_id": "r0", "benchmark": "cowork_bench", "instance_id": FILE_TASK,
        "status": "passed", "outcome": "scored", "attempt": 1, "ts_unix": 0.0,
        "details": {"runtime_image": runtime, "pg_image": pg}})


def test_each_differing_field_is_named_with_both_values() -> None:
    now = manifest("r2", "c2")
    same: Ancestor = ("/runs/r1", manifest("r1", "c2", {"runtime": "sha256:rt", "pg": "sha256:pg"}), [])
    assert differences(now, {"runtime": "sha256:rt", "pg": "sha256:pg"}, [same]) == []
    old: Ancestor = ("/runs/r1", manifest("r1", "c1", {"runtime": "sha256:old", "pg": "sha256:pg"}), [])
    found = differences(now, {"runtime": "sha256:rt", "pg": "sha256:pg"}, [old])
    assert [(d.field, d.was, d.now, d.waivable) for d in found] == [
        ("harness commit", "c1", "c2", False), ("runtime image", "sha256:old", "sha256:rt", True)]
    assert found[1].text() == "runtime image sha256:old in /runs/r1, sha256:rt now"
    dry: Ancestor = ("/runs/r0", manifest("r0", "c0", dry_run=True), [])
    assert differences(now, {"runtime": "x", "pg": "y"}, [dry]) == []  # nothing ran there


def test_an_older_ancestor_is_read_from_its_rows() -> None:
    old = manifest("r1", "c1")
    assert run_images(old, [row("sha256:a", "sha256:p"), row("sha256:b", "sha256:p")]) == {
        "runtime": {"sha256:a", "sha256:b"}, "pg": {"sha256:p"}}
    found = differences(manifest("r2", "c1"), {"runtime": "sha256:a", "pg": "sha256:p2"},
                        [("/runs/r1", old, [row("sha256:a", "sha256:p")])])
    assert [(d.field, d.was) for d in found] == [("PostgreSQL image", "sha256:p")]


def test_a_cowork_waiver_is_named_among_the_reasons_not_to_report(tmp_path: Path) -> None:
    run = run_pytest(TARGET, tmp_path / "dry", "--cowork-root", str(FIXTURE),
                     "--cowork-allow-dirty-bench", "--cowork-allow-missing-tools", "--dry-run")
    assert run.rc == 0, run.out
    m = run.manifest
    assert m["reportable"] is False
    assert any(r.startswith(DIRTY_WAIVER) for r in m["not_reportable"]), m["not_reportable"]
    assert any(r.startswith(TOOLS_WAIVER) for r in m["not_reportable"])
    run.result.stdout.fnmatch_lines([f"not reportable: *{DIRTY_WAIVER}*"])


def clean_agent_repo(tmp: Path) -> Path:
    repo = tmp / "agent-src"
    repo.mkdir()
    (repo / "agent.py").write_text("print('agent')\n")
    for cmd in (["init", "-q"], ["add", "."],
                ["-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "a"]):
        subprocess.run(["git", "-C", str(repo), *cmd], check=True, capture_output=True)
    return repo


def harness_head() -> str:
    done = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True)
    return done.stdout.strip()


def edit_manifest(root: Path, change: Any) -> None:
    path = root / "run_manifest.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


@pytest.mark.docker
def test_a_resume_on_other_images_or_another_harness_commit_is_refused(tmp_path: Path) -> None:
    repo = clean_agent_repo(tmp_path)
    common = ("--cowork-root", str(FIXTURE), "--cowork-allow-dirty-bench", "--agent", "oracle",
              "--agent-repo", str(repo), "--instance", FILE_TASK)
    first = run_pytest(TARGET, tmp_path / "r1", *common, "--cowork-task-timeout", "300")
    assert first.rc == 0, first.out
    record = first.manifest["extra"]["cowork"]
    images = record["run_images"]
    assert set(images) == {"runtime", "pg"} and all(v.startswith("sha256:") for v in images.values())
    assert first.latest[FILE_TASK]["details"]["cowork_bench"]["runtime_image"] == images[
        "runtime"]
    # the only reason not to report it is the waiver it was given
    assert first.manifest["reportable"] is False
    assert [r.split(" (")[0] for r in first.manifest["not_reportable"]] == [DIRTY_WAIVER]

    # the ancestor ran another runtime image (as if the harness's image had been rebuilt);
    # its harness commit is this checkout's (so a commit made meanwhile does not interfere)
    edit_manifest(tmp_path / "r1", lambda d: d["extra"]["cowork"]["run_images"].update(
        runtime="sha256:" + "0" * 64))
    edit_manifest(tmp_path / "r1", lambda d: d["source"].update(head=harness_head()))
    resume = ("--resume-from", str(tmp_path / "r1"), "--cowork-task-timeout", "300")
    refused = run_pytest(TARGET, tmp_path / "r2", *common, *resume)
    assert refused.rc == 2, refused.out
    assert refused.manifest["refusal"]["reason"] == "cowork_resume_mismatch"
    message = refused.manifest["refusal"]["message"]
    assert "runtime image" in message and "0" * 64 in message and images["runtime"] in message
    assert "--allow-image-change" in message and "PostgreSQL image" not in message

    edit_manifest(tmp_path / "r1", lambda d: d["source"].update(head=harness_head()))
    waived = run_pytest(TARGET, tmp_path / "r3", *common, *resume, "--allow-image-change")
    assert waived.rc == 0, waived.out
    assert any(r.startswith("cowork resume waived runtime image change")
               for r in waived.manifest["not_reportable"])

    # and another harness commit: not waivable by the image flag
    edit_manifest(tmp_path / "r1", lambda d: d["source"].update(head="f" * 40))
    other = run_pytest(TARGET, tmp_path / "r4", *common, *resume, "--allow-image-change")
    assert other.rc == 2, other.out
    text = other.manifest["refusal"]["message"]
    assert "harness commit" in text and "f" * 40 in text
