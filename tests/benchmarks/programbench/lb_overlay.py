"""ProgramBench tasks that the official ``programbench submit package`` takes, offline.

``submit package`` packages only known, non-fixture instances: it drops every ``testorg__``
id, and every offline fixture task has one. An overlay adds fixture tasks under
real-looking ids (``harnessfix__<name>``: the fixture task's task.yaml, tests.json and test
branch blob under another name) to a private copy of the installed package's code, whose
``data/tasks`` links to every installed task plus the new ones; it goes first on
``PYTHONPATH`` for the run and the official commands. The installed package is not changed
(other tests count its tasks). Each task's image is the offline fixture's, tagged with the
name ``programbench eval`` derives from the id (:func:`tagged` removes the tags after).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import docker

from benchmarks.programbench.fixture import ensure_fixture
from benchmarks.programbench.fixture_image import fixture_image
from tests.support.suite import REPO_ROOT

PREFIX = "harnessfix__"


def overlay_id(fixture_id: str) -> str:
    """``testorg__x.y`` as the overlay names it."""
    return PREFIX + fixture_id.split("__", 1)[1]


@dataclass(frozen=True)
class Overlay:
    pythonpath: str
    blob_dir: Path

    def variables(self) -> dict[str, str]:
        return {"PYTHONPATH": self.pythonpath, "PROGRAMBENCH_BLOB_DIR": str(self.blob_dir)}

    def env(self) -> dict[str, str]:
        return {**os.environ, **self.variables()}


def build_overlay(dest: Path, fixture_ids: Sequence[str]) -> Overlay:
    import programbench

    fixture = ensure_fixture()
    src = Path(programbench.__file__).parent
    tasks_src = src / "data" / "tasks"
    pkg = dest / "site" / "programbench"

    def skip(folder: str, names: list[str]) -> list[str]:
        return [n for n in names
                if n == "__pycache__" or (Path(folder) == src / "data" and n == "tasks")]

    shutil.copytree(src, pkg, ignore=skip)
    tasks = pkg / "data" / "tasks"
    tasks.mkdir()
    for task in tasks_src.iterdir():
        (tasks / task.name).symlink_to(task)
    blobs = dest / "blobs"
    for fid in fixture_ids:
        new = overlay_id(fid)
        shutil.copytree(tasks_src / fid, tasks / new,
                        ignore=shutil.ignore_patterns("__pycache__"))
        yaml_path = tasks / new / "task.yaml"
        yaml_path.write_text(yaml_path.read_text().replace("testorg/", "harnessfix/"))
        shutil.copytree(Path(fixture.blob_dir) / fid / "tests", blobs / new / "tests")
    path = os.pathsep.join(
        [str(dest / "site"), str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return Overlay(path, blobs)


@contextmanager
def tagged(fixture_ids: Sequence[str]) -> Iterator[None]:
    """The fixture image tagged as each overlay task's image, the tags removed after the last
    user is done: modules on other xdist workers tag the same names (a count under a file
    lock, so one module's teardown never untags what another still runs on)."""
    client = docker.from_env()
    names = [fixture_image(overlay_id(fid)) for fid in fixture_ids]
    image = client.images.get(ensure_fixture().image_id)
    with _users(+1):
        for name in names:
            repo, tag = name.rsplit(":", 1)
            assert image.tag(repo, tag)
    try:
        yield
    finally:
        with _users(-1) as left:
            if left == 0:
                for name in names:
                    with contextlib.suppress(docker.errors.NotFound):
                        client.images.remove(name, noprune=True)  # the tag only


@contextmanager
def _users(change: int) -> Iterator[int]:
    """The number of live users of the tags after ``change``, under an exclusive lock."""
    path = Path(tempfile.gettempdir()) / "harness-lb-overlay-tags.count"
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            count = int(path.read_text() or 0) if path.is_file() else 0
        except ValueError:
            count = 0
        count = max(0, count + change)
        path.write_text(str(count))
        yield count
