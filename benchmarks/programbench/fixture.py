"""The offline fixture: image, blob directory and oracle files for ``testorg__calculator.abc1234``
and the other offline fixture tasks (:mod:`benchmarks.programbench.fixture_tasks`).

``ensure_fixture()`` makes everything ``programbench eval`` and an agent phase need with no
network (reference §7), idempotently and once per machine (a file lock plus a marker file):

* the extra fixture tasks installed beside the package's calculator
  (:func:`~benchmarks.programbench.fixture_tasks.install_fixture_tasks`);
* the image :data:`~benchmarks.programbench.fixture_image.FIXTURE_IMAGE`
  (see :mod:`benchmarks.programbench.fixture_image`), also tagged for every fixture task;
* a blob directory for ``PROGRAMBENCH_BLOB_DIR`` holding
  ``testorg__calculator.abc1234/tests/33128f6b8600.tar.gz`` (``eval/run.sh`` and
  ``eval/tests/test_calculator.py``), whose ``run.sh`` passes ``--rootdir=eval`` so JUnit names
  match ``tests.json`` (``tests.test_calculator.*``): the bundled correct submission scores
  1.0 instead of 0.5; and ``<id>/tests/<branch>.tar.gz`` of every extra fixture task;
* the package's bundled submissions (``data/test_runs/{correct,incorrect}``) unpacked: the
  correct one is what the oracle agent writes into the workspace.

The package reads ``PROGRAMBENCH_BLOB_DIR`` at import time: pass ``blob_dir`` to
:mod:`benchmarks.programbench.official_eval`, which runs the CLI as a subprocess with it set.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from filelock import FileLock
from pydantic import BaseModel, ConfigDict

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench import fixture_image as img
from benchmarks.programbench.fixture_tasks import (
    EXTRA_TASKS,
    FIXTURE_TASK_IDS,
    install_fixture_tasks,
    tasks_fingerprint,
)
from benchmarks.programbench.tasks import programbench_version, tasks_dir
from harness.api import atomic_write_bytes, atomic_write_text, cache_root

if TYPE_CHECKING:
    import docker

FIXTURE_SCHEMA = "harness.programbench.fixture.v2"
PYTEST_CALL = "python3 -m pytest eval/tests/"
PYTEST_CALL_FIXED = "python3 -m pytest --rootdir=eval eval/tests/"
LOCK_TIMEOUT_S = 1800.0
BlobMTime = 946684800


class FixturePaths(BaseModel):
    """``fixture.json`` in the fixture cache folder: where everything is."""

    model_config = ConfigDict(extra="forbid")

    schema_version: str = FIXTURE_SCHEMA
    instance_id: str = FIXTURE_ID
    image: str  # programbench/testorg_1776_calculator.abc1234:task_cleanroom_v6
    image_id: str
    blob_dir: str  # value for PROGRAMBENCH_BLOB_DIR
    oracle_dir: str  # the bundled correct submission, unpacked
    oracle_files: list[str]  # paths relative to oracle_dir
    incorrect_dir: str  # the bundled incorrect submission, unpacked
    task_ids: list[str]  # every offline fixture task (each has a blob and an image tag)
    reference_sha256: str
    programbench_version: str
    fingerprint: str

    def oracle_contents(self) -> dict[str, bytes]:
        """The files the oracle agent writes into ``/workspace`` (relative path -> bytes)."""
        root = Path(self.oracle_dir)
        return {rel: (root / rel).read_bytes() for rel in self.oracle_files}


def fixture_cache_root(cache_dir: Path | str | None = None) -> Path:
    if cache_dir is not None:
        return Path(cache_dir)
    return cache_root() / "programbench-fixture"


def fixture_fingerprint() -> str:
    """Changes whenever anything the fixture is made of changes."""
    parts = {
        "schema": FIXTURE_SCHEMA,
        "programbench": programbench_version(),
        "c": img.CALCULATOR_C,
        "cflags": list(img.CFLAGS),
        "dockerfile": img.DOCKERFILE_BODY,
        "readme": img.README,
        "patch": [PYTEST_CALL, PYTEST_CALL_FIXED],
        "tasks": tasks_fingerprint(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def bundled_submission_zip(kind: Literal["correct", "incorrect"]) -> Path:
    data = tasks_dir().parent / "test_runs" / kind / FIXTURE_ID / "submission.zip"
    if not data.exists():
        raise FileNotFoundError(f"the programbench package has no bundled {kind} run at {data}")
    return data


def unpack_bundled_submission(kind: Literal["correct", "incorrect"], dest: Path) -> list[str]:
    """Unpack a bundled ``submission.zip`` into ``dest``; ``*.sh`` become executable."""
    names: list[str] = []
    with zipfile.ZipFile(bundled_submission_zip(kind)) as zf:
        for member in sorted(zf.infolist(), key=lambda m: m.filename):
            rel = member.filename.lstrip("/")
            if member.is_dir() or not rel or ".." in Path(rel).parts:
                continue
            target = dest / rel
            mode = 0o755 if rel.endswith(".sh") else 0o644
            atomic_write_bytes(target, zf.read(member), mode=mode)
            names.append(rel)
    return names


def _fixed_run_sh(text: str) -> str:
    if PYTEST_CALL_FIXED in text:
        return text
    if PYTEST_CALL not in text:
        raise RuntimeError(
            f"the fixture's run.sh no longer contains {PYTEST_CALL!r}; "
            "update benchmarks/programbench/fixture.py for this programbench version"
        )
    return text.replace(PYTEST_CALL, PYTEST_CALL_FIXED)


def _branch_files(branch_dir: Path) -> dict[str, bytes]:
    """The package's test branch folder (``eval/...``), run.sh fixed."""
    files = sorted(
        p
        for p in branch_dir.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    )
    out: dict[str, bytes] = {}
    for path in files:
        rel = path.relative_to(branch_dir).as_posix()
        data = path.read_bytes()
        out[rel] = _fixed_run_sh(data.decode()).encode() if rel == "eval/run.sh" else data
    return out


def _branch_blob(files: dict[str, bytes]) -> bytes:
    """A deterministic gzip tar of one test branch (``eval/...`` entries)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
        for rel, data in sorted(files.items()):
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            info.mtime = BlobMTime
            info.mode = 0o755 if rel.endswith(".sh") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def build_blob_dir(dest: Path) -> Path:
    """Write ``<dest>/<task id>/tests/<branch>.tar.gz`` for every active branch of every
    fixture task; return dest."""
    task = tasks_dir() / FIXTURE_ID
    branches = json.loads((task / "tests.json").read_text())["branches"]
    for branch, info in sorted(branches.items()):
        if info.get("ignored"):
            continue
        blob = _branch_blob(_branch_files(task / "tests" / branch))
        atomic_write_bytes(dest / FIXTURE_ID / "tests" / f"{branch}.tar.gz", blob)
    for extra in EXTRA_TASKS:
        atomic_write_bytes(dest / extra.instance_id / "tests" / f"{extra.branch}.tar.gz",
                           _branch_blob(extra.branch_files()))
    return dest


def _read_marker(marker: Path) -> FixturePaths | None:
    """The recorded fixture, or None when the marker or anything it names is missing."""
    try:
        paths = FixturePaths.model_validate_json(marker.read_text())
    except (OSError, ValueError):
        return None
    blobs = [Path(paths.blob_dir) / iid / "tests" for iid in FIXTURE_TASK_IDS]
    oracle = [Path(paths.oracle_dir) / rel for rel in paths.oracle_files]
    if (
        not all(blob.is_dir() for blob in blobs)
        or not all(p.is_file() for p in oracle)
        or not Path(paths.incorrect_dir).is_dir()
    ):
        return None
    return paths


def ensure_fixture(cache_dir: Path | str | None = None, *, image: bool = True,
                   client: docker.DockerClient | None = None) -> FixturePaths:
    """Build (once) and return the fixture; safe to call from every xdist worker.

    ``image=False`` makes the blob directory and oracle files only: the image comes from a
    registry (``--image-mirror``), as a real task's would. ``client``: the engine of the
    image (default: the environment's).
    """
    install_fixture_tasks()
    fingerprint = fixture_fingerprint()
    root = fixture_cache_root(cache_dir) / fingerprint
    root.mkdir(parents=True, exist_ok=True)
    marker = root / "fixture.json"
    with FileLock(str(root.parent / f"{fingerprint}.lock")).acquire(timeout=LOCK_TIMEOUT_S):
        reference = root / "reference" / "calculator"
        paths = _read_marker(marker) if reference.exists() else None
        if paths is None:
            reference_sha = img.compile_reference(reference)
            blob_dir = build_blob_dir(root / "blobs")
            oracle_files = unpack_bundled_submission("correct", root / "oracle" / "correct")
            unpack_bundled_submission("incorrect", root / "oracle" / "incorrect")
            paths = FixturePaths(
                image=img.FIXTURE_IMAGE,
                image_id="",
                blob_dir=str(blob_dir),
                oracle_dir=str(root / "oracle" / "correct"),
                oracle_files=oracle_files,
                incorrect_dir=str(root / "oracle" / "incorrect"),
                task_ids=list(FIXTURE_TASK_IDS),
                reference_sha256=reference_sha,
                programbench_version=programbench_version(),
                fingerprint=fingerprint,
            )
        if not image:
            return paths
        # Always (re)assert the image: a no-op when its content-hash tag exists.
        tag, image_id = img.ensure_fixture_image(
            reference.read_bytes(), also_for=tuple(t.instance_id for t in EXTRA_TASKS),
            client=client)
        if paths.image_id != image_id or paths.image != tag:
            paths = paths.model_copy(update={"image": tag, "image_id": image_id})
            atomic_write_text(marker, paths.model_dump_json(indent=2) + "\n")
    return paths


if __name__ == "__main__":  # python3 -m benchmarks.programbench.fixture: install and build
    built = ensure_fixture()
    print(f"offline fixture tasks {', '.join(built.task_ids)}: image {built.image} "
          f"({built.image_id[:19]}), blobs {built.blob_dir}")
