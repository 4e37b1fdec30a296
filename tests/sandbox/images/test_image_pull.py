"""Task images pulled from a real registry (Debian's docker-registry on loopback).

The ProgramBench fixture image is pushed under the mirror's name; the runner pulls it with
``--image-mirror``, records the digest, tags the canonical name for the official eval, and
the instance is scored by the real ``programbench eval``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.fixture import ensure_fixture
from benchmarks.programbench.fixture_image import FIXTURE_IMAGE
from tests.sandbox.images.registry_support import Registry, push, running_registry
from tests.support.suite import run_pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]

TARGET = "benchmarks/programbench"
REPO = FIXTURE_IMAGE.rsplit(":", 1)[0]  # programbench/testorg_1776_calculator.abc1234


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Registry, str]]:
    """A registry serving the fixture image under its canonical path; yields (registry, digest)."""
    fixture = ensure_fixture()
    with running_registry(tmp_path_factory.mktemp("registry")) as reg:
        digest = push(fixture.image_id, f"{reg.host}/{FIXTURE_IMAGE}")
        yield reg, digest


def row_of(run) -> dict:
    return run.latest[FIXTURE_ID]


def test_fixture_pulled_from_the_mirror_is_recorded_and_scored(registry, tmp_path: Path) -> None:
    reg, digest = registry
    before = reg.docker_pulls(REPO)
    run = run_pytest(TARGET, tmp_path / "run", "--pb-fixtures", "-k", "calculator", "--agent", "oracle",
                     "--image-mirror", reg.host, "--pull", "always")
    assert run.rc == 0, run.out
    row = row_of(run)
    assert row["score"] == 1.0 and row["resolved"] is True
    image = row["details"]["engine"]["image"]
    assert image["ref"] == FIXTURE_IMAGE
    assert image["pulled_from"] == f"{reg.host}/{FIXTURE_IMAGE}" and image["pulled"] is True
    assert image["repo_digest"] == digest and image["id"].startswith("sha256:")
    assert reg.docker_pulls(REPO) == before + 1
    # pinned in the manifest, not only in the row
    assert run.manifest["images"][f"programbench/{FIXTURE_ID}"]["repo_digest"] == digest
    assert run.manifest["extra"]["image_policy"]["mirror"] == reg.host


def test_prefetch_with_dry_run_pulls_and_records_without_running(registry, tmp_path: Path) -> None:
    reg, digest = registry
    before = reg.docker_pulls(REPO)
    run = run_pytest(TARGET, tmp_path / "prefetch", "--pb-fixtures", "-k", "calculator", "--dry-run",
                     "--pull", "always", "--image-mirror", reg.host)
    assert run.rc == 0, run.out
    row = row_of(run)
    assert row["reason_code"] == "dry_run" and "container" not in row["details"].get("engine", {})
    assert row["details"]["engine"]["image"]["repo_digest"] == digest
    assert run.manifest["images"][f"programbench/{FIXTURE_ID}"]["repo_digest"] == digest
    assert reg.docker_pulls(REPO) == before + 1


def test_unreachable_registry_is_a_pull_failure_after_retries(tmp_path: Path) -> None:
    from tests.sandbox.images.registry_support import free_port

    dead = f"127.0.0.1:{free_port()}"  # nothing listens there
    run = run_pytest(TARGET, tmp_path / "dead", "--pb-fixtures", "-k", "calculator", "--agent", "oracle",
                     "--image-mirror", dead, "--pull", "always", "--pull-retries", "1",
                     "--retry-infra", "0")  # the row read is the one try's, not a rerun's
    assert run.rc == 1, run.out
    row = row_of(run)
    assert row["status"] == "infra_failed" and row["reason_code"] == "image_pull_failed"
    assert row["score"] is None
    assert "after 2 attempt(s)" in row["error"] and dead in row["error"]


def test_digest_pin_mismatch_is_refused(registry, tmp_path: Path) -> None:
    reg, _ = registry
    pins = tmp_path / "pins.json"
    pins.write_text(json.dumps({FIXTURE_ID: "sha256:" + "0" * 64}))
    run = run_pytest(TARGET, tmp_path / "pinned", "--pb-fixtures", "-k", "calculator", "--agent", "oracle",
                     "--image-mirror", reg.host, "--image-digest-file", str(pins))
    assert run.rc == 2, run.out
    assert run.manifest["outcome"] == "refused"
    assert run.manifest["refusal"]["reason"] == "image_pin_mismatch"
    assert FIXTURE_ID in run.manifest["refusal"]["message"]
    assert not run.latest  # nothing ran


def test_digest_pin_runs_exactly_the_pinned_image(registry, tmp_path: Path) -> None:
    reg, digest = registry
    pins = tmp_path / "pins.json"
    pins.write_text(json.dumps({FIXTURE_ID: digest}))
    # the nop agent: the sandbox still runs the pinned image; no oracle work to score
    run = run_pytest(TARGET, tmp_path / "pinned", "--pb-fixtures", "-k", "calculator", "--agent", "nop",
                     "--image-mirror", reg.host, "--image-digest-file", str(pins))
    assert run.rc == 0, run.out
    image = row_of(run)["details"]["engine"]["image"]
    assert image["repo_digest"] == digest and image["pulled_from"].endswith("@" + digest)


def test_bad_digest_file_is_a_one_line_refusal(tmp_path: Path) -> None:
    pins = tmp_path / "pins.json"
    pins.write_text(json.dumps({FIXTURE_ID: "latest"}))
    run = run_pytest(TARGET, tmp_path / "bad", "--pb-fixtures", "-k", "calculator", "--dry-run",
                     "--image-digest-file", str(pins))
    assert run.rc == 2, run.out
    assert run.manifest["refusal"]["reason"] == "bad_digest_file"
    assert "--image-digest-file" in run.manifest["refusal"]["message"]


def test_two_workers_needing_one_image_make_one_pull(registry, tmp_path: Path) -> None:
    reg, _ = registry
    before = reg.docker_pulls(REPO)
    code = (
        "import sys; from pathlib import Path; from harness.sandbox.client import get_client;"
        "from harness.sandbox.images.pull import PullSettings, resolve_image;"
        "s = PullSettings(policy='always', mirror=sys.argv[1], lock_dir=Path(sys.argv[2]));"
        "print(resolve_image(get_client(), sys.argv[3], s).pulled)"
    )
    args = [sys.executable, "-c", code, reg.host, str(tmp_path / "locks"), FIXTURE_IMAGE]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = sorted(p.communicate(timeout=300)[0].strip() for p in procs)
    assert all(p.returncode == 0 for p in procs)
    assert outs == ["False", "True"]  # one pulled, the other found the run's pull marker
    assert reg.docker_pulls(REPO) == before + 1


def test_resume_refuses_an_image_repushed_with_other_content(registry, tmp_path: Path) -> None:
    reg, digest = registry
    first = run_pytest(TARGET, tmp_path / "a", "--pb-fixtures", "-k", "calculator", "--agent", "nop",
                       "--image-mirror", reg.host, "--pull", "always")
    assert first.rc == 0, first.out
    base = subprocess.run(["docker", "images", "-q", "harness/base"], capture_output=True,
                          text=True, check=True).stdout.split()[0]
    other = push(base, f"{reg.host}/{FIXTURE_IMAGE}")  # same tag, other content
    try:
        assert other != digest
        refused = run_pytest(TARGET, tmp_path / "b", "--resume-from", str(first.root),
                             "--image-mirror", reg.host, "--pull", "always", "--agent", "nop")
        assert refused.rc == 2, refused.out
        assert refused.manifest is not None, refused.out
        assert refused.manifest["refusal"], (refused.manifest, refused.out[-3000:])
        assert refused.manifest["refusal"]["reason"] == "image_changed", refused.manifest
        assert FIXTURE_ID in refused.manifest["refusal"]["message"]
        allowed = run_pytest(TARGET, tmp_path / "c", "--resume-from", str(first.root),
                             "--image-mirror", reg.host, "--pull", "always", "--agent", "nop",
                             "--allow-image-change", "--dry-run")
        assert allowed.rc == 0, allowed.out
        assert allowed.manifest["extra"]["image_changes_allowed"]
    finally:
        assert push(ensure_fixture().image_id, f"{reg.host}/{FIXTURE_IMAGE}") == digest
