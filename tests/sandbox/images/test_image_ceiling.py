"""``--image-disk-ceiling-gb``: task images pulled per task, removed after their eval, under a
disk ceiling (:mod:`harness.sandbox.images.ceiling`).

Real Docker and a real registry (Debian's ``docker-registry`` on loopback). A ceiling given in
fractions of a GiB plays the small disk: the test images are a few hundred MB unpacked, so
``0.001`` (1 MiB) is smaller than any of them. Harbor task folders name the images as their
``docker_image`` (pulled through the runner's trial, as ProgramBench's are).
"""

from __future__ import annotations

import argparse
import io
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from harness.runner.options import ceiling_gb
from harness.sandbox.images.build import base_recipe, ensure_image
from harness.sandbox.images.ceiling import CeilingFull, CeilingLedger, ImageCeiling, engine_key
from harness.sandbox.images.pull import PullSettings, remote_size, resolve_image
from tests.sandbox.engines.engines_support import Engine, second_engine
from tests.sandbox.images.registry_support import Registry, push, running_registry
from tests.support.suite import Run, run_pytest

__all__ = ["second_engine"]  # the session fixture (a second dockerd)

GIB = 1 << 30
TARGET = "benchmarks/harbor"
TEST_SH = "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"


@dataclass
class Served:
    reg: Registry
    refs: dict[str, str]  # name -> reference on the registry (absent from the engine)
    sizes: dict[str, int]  # name -> compressed size the registry reports


def _build(base: str, name: str, folder: Path) -> str:
    """A runnable image of its own: the base plus a file of random bytes (its own layer)."""
    import os

    folder.mkdir(parents=True)
    (folder / "blob").write_bytes(os.urandom(256 << 10))
    (folder / "Dockerfile").write_text(f"FROM {base}\nCOPY blob /ceiling-{name}\n")
    out = subprocess.run(["docker", "build", "-q", str(folder)], capture_output=True,
                         text=True, check=True)
    return out.stdout.strip()


def _gone(*refs: str) -> None:
    for ref in refs:
        subprocess.run(["docker", "rmi", ref], capture_output=True, check=False)


def _present(ref: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", ref], capture_output=True,
                          check=False).returncode == 0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Two runnable images (``one``, ``two``) on a loopback registry, not on the engine."""
    base = ensure_image(base_recipe()).tag
    folder = tmp_path_factory.mktemp("ceiling")
    with running_registry(folder / "registry") as reg:
        refs: dict[str, str] = {}
        for name in ("one", "two"):
            image_id = _build(base, name, folder / name)
            refs[name] = f"{reg.host}/ceiling/{name}:1"
            push(image_id, refs[name])
            _gone(image_id)
        sizes = {name: remote_size(ref) or 0 for name, ref in refs.items()}
        assert all(sizes.values()), sizes
        yield Served(reg, refs, sizes)
        _gone(*refs.values())


def harbor_tasks(root: Path, images: dict[str, str]) -> Path:
    """Harbor task folders, one per ``name -> docker_image``; every verifier rewards 1."""
    for name, image in images.items():
        task = root / name
        (task / "environment").mkdir(parents=True)
        (task / "tests").mkdir()
        (task / "tests" / "test.sh").write_text(TEST_SH)
        (task / "instruction.md").write_text(f"Task {name}: nothing to do.\n")
        (task / "task.toml").write_text(
            f'[environment]\ndocker_image = "{image}"\ncpus = 1\nmemory_mb = 256\n\n'
            '[agent]\ntimeout_sec = 60.0\n\n[verifier]\ntimeout_sec = 60.0\n')
    return root


def run_harbor(tmp_path: Path, images: dict[str, str], *args: str) -> Run:
    tasks = harbor_tasks(tmp_path / "tasks", images)
    return run_pytest(TARGET, tmp_path / "run", "--harbor-tasks", str(tasks), "--agent", "nop",
                      *args, timeout=300)


def ceiling_of(run: Run, key: str) -> dict:
    return dict(run.latest[key]["details"]["engine"]["image"]["ceiling"])


@pytest.mark.docker
@pytest.mark.slow  # a loopback registry and two image builds: the slow tier
def test_a_pulled_image_is_removed_after_its_eval_and_a_preexisting_one_is_kept(
        served: Served, tmp_path: Path) -> None:
    kept = f"ceiling-test/preexisting-{tmp_path.name[-8:].lower()}:1"
    subprocess.run(["docker", "tag", ensure_image(base_recipe()).tag, kept], check=True)
    try:
        run = run_harbor(tmp_path, {"pulled": served.refs["one"], "local": kept},
                         "--image-disk-ceiling-gb", "1")
        assert run.rc == 0, run.out
        pulled, local = ceiling_of(run, "pulled"), ceiling_of(run, "local")
        assert run.latest["pulled"]["score"] == 1.0  # the eval ran, in the pulled image
        assert run.latest["pulled"]["details"]["engine"]["image"]["pulled"] is True
        assert pulled["counted"] is True and pulled["removed_after_eval"] is True
        assert pulled["freed_bytes"] > 0 and pulled["size_from"] == "registry"
        assert pulled["released_unix"] >= pulled["admitted_unix"]
        image_id = run.latest["pulled"]["details"]["engine"]["image"]["id"]
        assert not _present(served.refs["one"]) and not _present(image_id)
        assert local["counted"] is False and local["removed_after_eval"] is False
        assert local["kept_reason"].startswith("preexisting")
        assert _present(kept)  # never this run's to remove
        assert run.manifest["extra"]["image_policy"]["disk_ceiling_gb"] == 1.0
    finally:
        _gone(kept)


@pytest.mark.docker
@pytest.mark.slow  # a loopback registry and two image builds: the slow tier
def test_two_images_over_the_ceiling_together_are_held_one_after_the_other(
        served: Served, tmp_path: Path) -> None:
    # Each image fits alone (its compressed size is under the ceiling), never both: the
    # first one pulled holds its whole engine size, more than the ceiling leaves.
    ceiling = 1.2 * max(served.sizes.values()) / GIB
    run = run_harbor(tmp_path, {"a": served.refs["one"], "b": served.refs["two"]},
                     "-n", "2", "--image-disk-ceiling-gb", f"{ceiling:.6f}")
    assert run.rc == 0, run.out
    a, b = ceiling_of(run, "a"), ceiling_of(run, "b")
    first, second = sorted((a, b), key=lambda c: c["admitted_unix"])
    assert first["removed_after_eval"] is True and second["removed_after_eval"] is True
    assert second["admitted_unix"] >= first["released_unix"]  # never both held
    assert second["held_bytes_before"] == 0
    assert second["waited_s"] > 0 or second["evicted"]  # it waited (or evicted) for room
    workers = {run.latest[k]["worker"] for k in ("a", "b")}
    assert len(workers) == 2, workers  # two workers at once, not one after the other
    assert not _present(served.refs["one"]) and not _present(served.refs["two"])
    ledger = CeilingLedger.model_validate_json(
        next((run.root / ".harness" / "images").glob("ceiling-*.json")).read_text())
    assert ledger.images == {}  # nothing of the run's left on the engine


@pytest.mark.docker
@pytest.mark.slow  # a loopback registry and two image builds: the slow tier
def test_an_image_bigger_than_the_ceiling_is_refused_before_any_pull(
        served: Served, tmp_path: Path) -> None:
    repo = "ceiling/two"
    before = served.reg.docker_pulls(repo)
    run = run_harbor(tmp_path, {"big": served.refs["two"]}, "--image-disk-ceiling-gb", "0.001")
    assert run.rc == 1, run.out
    row = run.latest["big"]
    assert row["outcome"] == "infra_failed" and row["reason_code"] == "image_exceeds_ceiling"
    error = row["error"]
    assert "\n" not in error.strip(), error  # one line
    for says in (served.refs["two"], "GiB", "--image-disk-ceiling-gb 0.001",
                 "refused before pulling", "raise the ceiling", "free disk"):
        assert says in error, (says, error)
    assert served.reg.docker_pulls(repo) == before  # the engine never asked the registry
    assert not _present(served.refs["two"])
    assert [r["instance_id"] for r in run.rows].count("big") == 1  # not retried in the run


def _tiny(tag: str, data: bytes) -> str:
    """An image of one file (``docker import``): not runnable, enough to be pulled."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("blob")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    out = subprocess.run(["docker", "import", "-", tag], input=buf.getvalue(),
                         capture_output=True, check=True)
    return out.stdout.decode().strip()


@pytest.mark.docker
@pytest.mark.slow  # a loopback registry and two image builds: the slow tier
def test_an_image_a_kept_container_uses_stays_and_an_idle_one_is_evicted(
        served: Served, tmp_path: Path) -> None:
    import os

    refs = {}
    for name in ("kept", "next"):
        refs[name] = f"{served.reg.host}/ceiling/tiny-{name}:1"
        push(_tiny(f"ceiling-test/tiny-{name}-{tmp_path.name[-8:].lower()}:1",
                   os.urandom(64 << 10)), refs[name])
        _gone(f"ceiling-test/tiny-{name}-{tmp_path.name[-8:].lower()}:1")
    client = docker.from_env()
    settings = PullSettings(lock_dir=tmp_path / "pulls")
    room = 3 * max(remote_size(r) or 0 for r in refs.values()) // 2  # one at a time

    def ceiling(holder: str) -> ImageCeiling:
        return ImageCeiling(client.api, tmp_path / "images", room, holder)

    first = ceiling("task-a")
    held = resolve_image(client, refs["kept"], settings, ceiling=first)
    container = client.api.create_container(held.id, command=["/blob"])  # kept for a reattach
    try:
        done = first.release()[refs["kept"]]
        assert done.removed_after_eval is False and "in use by container" in (done.kept_reason
                                                                              or "")
        with pytest.raises(CeilingFull, match="no other instance of the run holds"):
            resolve_image(client, refs["next"], settings, ceiling=ceiling("task-b"))
        assert _present(refs["kept"]) and not _present(refs["next"])
    finally:
        client.api.remove_container(container["Id"], force=True)
    second = ceiling("task-b")
    record = resolve_image(client, refs["next"], settings, ceiling=second)
    assert record.ceiling is not None and record.pulled
    assert [e.ref for e in record.ceiling.evicted] == [refs["kept"]]  # idle now: evicted
    assert not _present(refs["kept"])
    assert second.release()[refs["next"]].removed_after_eval is True
    assert not _present(refs["next"])


@pytest.mark.parametrize("raw", ["0", "-1", "nan", "inf", "ten"])
def test_the_ceiling_option_refuses_what_is_not_a_positive_size(raw: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="is not a positive number of GiB"):
        ceiling_gb(raw)
    assert ceiling_gb("0.001") == 0.001 and ceiling_gb("12") == 12.0


def test_programbench_batch_eval_under_a_ceiling_is_refused_in_one_line(tmp_path: Path) -> None:
    run = run_pytest("benchmarks/programbench", tmp_path / "run", "--pb-fixtures", "--dry-run",
                     "--pb-eval", "batch", "--image-disk-ceiling-gb", "10", timeout=120)
    assert run.rc == 2, run.out
    lines = [line for line in run.out.splitlines() if "--image-disk-ceiling-gb" in line]
    assert len(lines) == 1 and "use --pb-eval per-task" in lines[0], run.out
    assert "Traceback" not in run.out


@pytest.mark.docker
@pytest.mark.slow  # a second dockerd
def test_each_engine_keeps_its_own_ceiling(second_engine: Engine) -> None:
    """Two engines behind unix:// sockets (docker-py names both ``http+docker://localhost``)
    keep separate ledgers: an image pulled on one is never counted, evicted or removed as
    the other's."""
    local = docker.APIClient()
    other = second_engine.client().api
    try:
        assert local.base_url == other.base_url  # what the old key read
        assert engine_key(local) != engine_key(other)
        assert engine_key(local) == engine_key(docker.APIClient())  # the same engine again
    finally:
        local.close()
        other.close()
