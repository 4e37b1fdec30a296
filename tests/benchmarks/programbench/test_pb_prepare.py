"""Issue 43 (3): prepare-only. ``harness programbench prepare`` writes the task body and
packages the workspace of an already running cleanroom container, submitting nothing; the
real ``programbench eval`` scores its package like any other. The reference binary never
enters the package, under its name or another."""

from __future__ import annotations

import contextlib
import io
import json
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.fixture import ensure_fixture
from benchmarks.programbench.official_eval import evaluate_batch
from tests.support.suite import run_cli

pytestmark = pytest.mark.docker


@pytest.fixture
def cleanroom() -> Iterator[str]:
    """A running cleanroom container of the fixture task, with the oracle's files written
    by its agent user and a copy of the reference under another name."""
    fixture = ensure_fixture()
    client = docker.from_env()
    name = f"harness-test-prepare-{uuid.uuid4().hex[:8]}"
    box = client.containers.run(fixture.image, ["sleep", "600"], name=name, detach=True,
                                network_mode="none", user="agent", working_dir="/workspace")
    try:
        data = io.BytesIO()
        with tarfile.open(fileobj=data, mode="w") as tar:
            for rel, content in sorted(fixture.oracle_contents().items()):
                info = tarfile.TarInfo(rel)
                info.size, info.mode, info.uid, info.gid = len(content), 0o755, 1000, 1000
                tar.addfile(info, io.BytesIO(content))
        box.put_archive("/workspace", data.getvalue())
        done = box.exec_run(["sh", "-c", "cp /workspace/executable /workspace/copy.bin"],
                            user="root")
        assert done.exit_code == 0, done.output
        yield name
    finally:
        box.remove(force=True)


def test_prepare_packages_a_running_container_that_the_official_eval_scores(
        cleanroom: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = run_cli("programbench", "prepare", "--container", cleanroom, "--instance",
                   FIXTURE_ID, "--output", str(out), timeout=300)
    assert done.returncode == 0, done.stderr
    assert "nothing was submitted" in done.stdout
    folder = out / FIXTURE_ID
    body = json.loads((folder / "ouroboros_task_body.json").read_text())
    assert body["executor_ref"]["container_name"] == cleanroom
    assert body["resource_policy"]["protected_artifacts"][0]["allow"] == ["execute"]
    with tarfile.open(folder / "submission.tar.gz") as tar:
        names = {m.name.removeprefix("./") for m in tar.getmembers()}
    assert "compile.sh" in names or any(n.endswith(".sh") for n in names), names
    assert "executable" not in names and "copy.bin" not in names  # by name, and by bytes
    assert docker.from_env().containers.get(cleanroom).status == "running"  # left as it was
    results = evaluate_batch(out, blob_dir=ensure_fixture().blob_dir)
    assert results[FIXTURE_ID].score == 1.0


@pytest.fixture
def other_image() -> Iterator[str]:
    """A running container of an image that is no task's."""
    client = docker.from_env()
    fixture_id = client.images.get(ensure_fixture().image).id
    box = None
    for image in client.images.list():  # the first one that can run `sleep` (a static
        # probe image cannot)
        if not image.tags or image.id == fixture_id or any(
                t.startswith("programbench/") for t in image.tags):
            continue
        name = f"harness-test-other-{uuid.uuid4().hex[:8]}"
        try:
            box = client.containers.run(image.id, ["sleep", "600"], detach=True,
                                        network_mode="none", entrypoint=[], name=name)
        except docker.errors.APIError:  # created, not started: removed before the next
            with contextlib.suppress(docker.errors.APIError):
                client.containers.get(name).remove(force=True)
            continue
        if box.status in ("created", "running"):
            break
    assert box is not None, "no local image other than the task's can run sleep"
    try:
        yield box.name
    finally:
        box.remove(force=True)


def test_prepare_refuses_bad_input_in_one_line(cleanroom: str, other_image: str,
                                               tmp_path: Path) -> None:
    cases = [
        (["--container", "no-such-container-xyz", "--instance", FIXTURE_ID], "no such container"),
        (["--container", cleanroom, "--instance", "nope__x.1"], "is not a ProgramBench task"),
        (["--container", other_image, "--instance", FIXTURE_ID],
         "pass the container of --instance"),
    ]
    for i, (args, message) in enumerate(cases):
        out = tmp_path / f"o{i}"
        done = run_cli("programbench", "prepare", *args, "--output", str(out), timeout=120)
        assert done.returncode == 2 and message in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and not out.exists()
