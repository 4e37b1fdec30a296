"""The checkout's own image: ``harness cowork build-image`` and ``--cowork-image`` (Docker).

A tiny checkout (``cowork_mini`` plus a root ``Dockerfile`` ``FROM`` the harness's runtime
image that writes ``/marker``), committed with git so it has a commit:

* build-image makes ``cowork-pack:<short sha>``, ``harness images list`` shows it, and a run
  with ``--cowork-image`` runs the agent in it (the marker reaches the workspace) and records
  the image ID in the manifest, the result config and the row (``--cowork-pg-image`` too); a
  resume with another image is refused;
* a Dockerfile whose ``RUN`` fails: exit 1, one line naming the failing step, the log's tail;
* ``--cowork-image nonexistent:1``: refused at admission, exit 2, naming build-image.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from benchmarks.cowork_bench.images import ensure_image
from tests.benchmarks.cowork.cowork_helpers import FIXTURE
from tests.support.suite import REPO_ROOT, Run, run_pytest

pytestmark = pytest.mark.docker

IID = "excel-sales-summary"


def harness_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=900, check=False)  # fmt: skip


def make_checkout(dest: Path, run_line: str) -> tuple[Path, str]:
    """``cowork_mini`` with a root Dockerfile, committed; returns (root, short sha)."""
    shutil.copytree(FIXTURE, dest)
    runtime = ensure_image("runtime").image_id
    (dest / "Dockerfile").write_text(f"FROM {runtime}\n{run_line}\n")
    git = ["git", "-C", str(dest), "-c", "user.email=t@example.org", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "fixture"], check=True)
    sha = subprocess.run([*git, "rev-parse", "--short=7", "HEAD"], check=True,
                         capture_output=True, text=True).stdout.strip()  # fmt: skip
    return dest, sha


@pytest.fixture
def built_tags() -> Iterator[list[str]]:
    """Tags a test built; removed afterwards (the engine is shared)."""
    tags: list[str] = []
    yield tags
    client = docker.from_env()
    for tag in reversed(tags):  # the derived image before its base
        with contextlib.suppress(docker.errors.APIError):
            client.api.remove_image(tag, force=True)


def cowork(root: Path, checkout: Path, *args: str) -> Run:
    return run_pytest("benchmarks/cowork_bench", root, "--cowork-root", str(checkout),
                      "--cowork-allow-bench-commit-mismatch", "--instance", IID, *args,
                      timeout=600)  # fmt: skip


@pytest.mark.slow
def test_build_image_then_run_the_agent_in_it(tmp_path: Path, built_tags: list[str]) -> None:
    checkout, sha = make_checkout(tmp_path / "bench", "RUN echo cowork-marker-7 > /marker")
    tag = f"cowork-pack:{sha}"
    built_tags.append(tag)
    res = harness_cli("cowork", "build-image", "--cowork-root", str(checkout))
    assert res.returncode == 0, res.stderr
    built = json.loads(res.stdout.strip().splitlines()[-1])
    built_tags.append(built["derived"]["tag"])  # the harness's layer on it: removed too
    assert built["tag"] == tag
    assert "Step 2/" in res.stderr and "RUN echo cowork-marker-7" in res.stderr
    assert Path(built["log"]).is_file()
    image_id = docker.from_env().api.inspect_image(tag)["Id"]
    assert built["image_id"] == image_id

    listed = harness_cli("images", "list")
    assert listed.returncode == 0, listed.stderr
    assert tag in listed.stdout and "built" in listed.stdout

    pg = ensure_image("pg15")  # given by its tag: resolved like any image, then recorded
    run = cowork(tmp_path / "run", checkout, "--cowork-image", tag, "--cowork-pg-image", pg.tag,
                 "--agent", "command", "--agent-command", "cat /marker > m.txt",
                 "-n", "1")  # fmt: skip  (a worker runs the image the controller admitted)
    assert run.rc == 0, run.out
    row = run.latest[IID]
    inst = run.root / "cowork_bench" / IID
    assert (inst / "workspace" / "m.txt").read_text().strip() == "cowork-marker-7"
    assert row["details"]["cowork_bench"]["runtime_image"] == image_id
    assert row["details"]["cowork_bench"]["pg_image"] == pg.image_id
    manifest = run.manifest
    assert manifest["extra"]["cowork"]["images"]["runtime"] == {
        "ref": tag, "id": image_id, "pulled": False, "repo_digest": None
    }  # fmt: skip
    assert manifest["config"]["cowork_bench.cowork_image_id"] == image_id
    assert manifest["extra"]["cowork"]["images"]["pg"]["id"] == pg.image_id

    other = ensure_image("runtime").tag  # the same options with another image: refused
    again = cowork(tmp_path / "resume", checkout, "--resume-from", str(run.root),
                   "--cowork-image", other, "--cowork-pg-image", pg.tag, "--agent", "command",
                   "--agent-command", "cat /marker > m.txt")  # fmt: skip
    assert again.rc == 2, again.out
    line = next(ln for ln in again.out.splitlines() if "configuration differs" in ln)
    assert "cowork_bench.cowork_image_id" in line and "agent.command" not in line


@pytest.mark.slow
def test_build_image_failing_step_exits_1(tmp_path: Path, built_tags: list[str]) -> None:
    checkout, sha = make_checkout(tmp_path / "bench", "RUN echo before && exit 7")
    built_tags.append(f"cowork-pack:{sha}")
    res = harness_cli("cowork", "build-image", "--cowork-root", str(checkout))
    assert res.returncode == 1, res.stderr
    failure = [ln for ln in res.stderr.splitlines() if "failed at" in ln]
    assert len(failure) == 1
    assert "Step 2/" in failure[0] and "RUN echo before && exit 7" in failure[0]
    assert "returned a non-zero code: 7" in failure[0]
    assert "  | before" in res.stderr  # the log's last lines follow


def test_missing_cowork_image_is_refused(tmp_path: Path) -> None:
    run = cowork(tmp_path / "run", FIXTURE, "--cowork-allow-dirty-bench", "--cowork-image",
                 "nonexistent:1", "--agent", "command", "--agent-command", "true")  # fmt: skip
    assert run.rc == 2, run.out
    line = next(ln for ln in run.out.splitlines() if "nonexistent:1" in ln)
    assert "--cowork-image nonexistent:1" in line and "harness cowork build-image" in line
    assert not run.rows
