"""A second Docker engine for the multi-engine tests, started and stopped by the tests.

``unshare -n dockerd`` with its own empty ``--config-file``, ``--data-root``,
``--exec-root``, ``--pidfile``, unix socket, ``--bridge none`` and its own network
namespace: started in the host's namespace with ``--bridge none``, a second daemon deletes
the system engine's ``docker0``. Storage: ``fuse-overlayfs`` when the host engine uses it
(containers start in 0.5 s; ``vfs`` copies the whole image per container, 8.6 s for the
283 MB base image here), else ``vfs``; ``HARNESS_TEST_ENGINE_DRIVER`` overrides
(:func:`engine_driver`, also the test hosts' of :mod:`tests.support.test_hosts`). Images
reach it through the harness itself (``docker save | docker load`` on first use).

Pre-loaded images: loading the Cowork images (pg15 and runtime, 1.5 GB) into a fresh engine
costs about 30 s and 40 CPU-s. :func:`cowork_engine` starts on a copy-on-write view of an
engine folder that already holds them: a kernel ``overlay`` mount (``redirect_dir=on``: the
daemon renames folders at start) whose lower layer is an image template under
:func:`harness.core.cache.cache_root` (``test-engine-images/<key>``; the key names the image
IDs, the storage driver and ``dockerd``'s version), made once by loading the images through the
harness's own transfer into an engine started for it, then reused by every engine, test and
session after (a shared lock while in use; a template unused for a day is removed). An engine
writes only to its own upper folder: a SIGKILLed engine cannot spoil the template. Without a
usable template (another driver, no overlay mount) the engine starts empty and the run moves
the images itself. The harness's transfer of a missing image stays tested on the fresh
engines of :func:`second_engine` (the ProgramBench fixture image, the perf test).

Import it as ``tests.sandbox.engines.engines_support`` and use :func:`second_engine` or
:func:`cowork_engine` (one engine per test, stopped after it) in a test module.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from harness.core.cache import cache_root
from harness.sandbox.cleanup import leaked_resources
from harness.sandbox.images.build import base_recipe, ensure_image
from harness.sandbox.images.transfer import transfer

START_TIMEOUT_S = 60
TEMPLATE_IDLE_S = 24 * 3600  # a template unused for this long is removed
TEMPLATE_DRIVERS = ("fuse-overlayfs", "vfs")  # drivers that work on an overlay data root


@dataclass
class Engine:
    url: str
    root: Path
    pid: int

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.url, timeout=120)

    def kill(self) -> None:
        """Kill the daemon (SIGKILL): the engine stops answering at once."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)


def dockerd_argv(root: Path, unix_url: str) -> list[str]:
    """A test engine's ``dockerd`` command line: its configuration (written here), data,
    exec root and pid file under ``root``, its socket ``unix_url``, no bridge, no iptables
    (run it in a network namespace of its own)."""
    (root / "daemon.json").write_text("{}\n")
    return [
        "dockerd",
        "--config-file",
        str(root / "daemon.json"),
        "--data-root",
        str(root / "data"),
        "--exec-root",
        str(root / "exec"),
        "--pidfile",
        str(root / "docker.pid"),
        "-H",
        unix_url,
        "--storage-driver",
        engine_driver(),
        "--bridge",
        "none",
        "--iptables=false",
        "--ip-masq=false",
    ]


def engine_driver() -> str:
    """The storage driver of a test engine: ``HARNESS_TEST_ENGINE_DRIVER``, else the system
    engine's when it is fuse-overlayfs (a container starts in 0.5 s; vfs copies the image per
    container) and the tool is installed, else vfs."""
    wanted = os.environ.get("HARNESS_TEST_ENGINE_DRIVER")
    if wanted:
        return wanted
    client = docker.from_env()
    try:
        host = client.info().get("Driver")
    finally:
        client.close()
    return (
        "fuse-overlayfs" if host == "fuse-overlayfs" and shutil.which("fuse-overlayfs") else "vfs"
    )


def _mount_over(lower: Path, root: Path) -> None:
    """``root/data``: a copy-on-write view of ``lower`` (writes go to ``root/upper``); if the
    mount fails, an empty folder (warned: the run moves the images, slowly)."""
    for sub in ("upper", "work", "data"):
        (root / sub).mkdir()
    options = f"lowerdir={lower},upperdir={root / 'upper'},workdir={root / 'work'},redirect_dir=on"
    done = subprocess.run(
        ["mount", "-t", "overlay", "overlay", "-o", options, str(root / "data")],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        warnings.warn(
            f"no overlay mount for a test engine ({done.stderr.decode()[-300:]}): "
            "it starts empty, the run moves every image it needs",
            stacklevel=2,
        )


def start_engine(root: Path, images: Path | None = None) -> tuple[Engine, subprocess.Popen[bytes]]:
    """Start a second dockerd under ``root``; return once it answers. ``images``: a template's
    data folder (:func:`images_template`) the engine starts from, copy-on-write."""
    if images is not None:
        _mount_over(images, root)
    sock = root / "docker.sock"
    argv = ["unshare", "-n", *dockerd_argv(root, f"unix://{sock}")]
    log = open(root / "dockerd.log", "wb")  # noqa: SIM115 (closed with the process)
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    url = f"unix://{sock}"
    try:
        _wait_answers(root, proc, url)
    except BaseException:  # a failed start leaves no daemon, process or mount behind
        proc.kill()
        proc.wait(timeout=10)
        _reap(Engine(url, root, proc.pid))
        raise
    return Engine(url, root, proc.pid), proc


def _wait_answers(root: Path, proc: subprocess.Popen[bytes], url: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"second dockerd exited {proc.returncode}: "
                f"{(root / 'dockerd.log').read_text()[-2000:]}"
            )
        if (root / "docker.sock").exists():
            client = docker.DockerClient(base_url=url, timeout=5)
            try:
                if client.ping():
                    return
            except docker.errors.DockerException:
                pass
            finally:
                client.close()
        time.sleep(0.2)
    raise RuntimeError("second dockerd did not answer within 60 s")


def _descendants_of_engine(root: Path) -> list[int]:
    """Processes of this engine (containerd, shims: their argv names ``root``) and children."""
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(root).encode() in (entry / "cmdline").read_bytes():
                    found.add(int(entry.name))
            except OSError:
                continue
    todo = list(found)
    while todo:
        pid = todo.pop()
        for task in Path(f"/proc/{pid}/task").glob("*/children"):
            try:
                kids = {int(k) for k in task.read_text().split()}
            except OSError:
                continue
            todo.extend(kids - found)
            found |= kids
    return sorted(found)


def _reap(engine: Engine) -> None:
    """Kill what the engine left behind (containerd, shims, their children: after a SIGKILL
    they live on) and unmount its folders."""
    for pid in _descendants_of_engine(engine.root):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    subprocess.run(
        ["umount", "-R", "-l", str(engine.root / "data")], capture_output=True, check=False
    )
    subprocess.run(
        ["umount", "-R", "-l", str(engine.root / "exec")], capture_output=True, check=False
    )


def stop_engine(engine: Engine, proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    _reap(engine)
    # The engine's images (fuse-overlayfs or vfs layers: many thousand files) take seconds
    # to delete: a detached rm does it while the tests go on.
    subprocess.run(
        ["sh", "-c", 'rm -rf --one-file-system -- "$1" >/dev/null 2>&1 &', "sh", str(engine.root)],
        check=True,
    )


def system_bridge_works() -> None:
    """The system engine still runs a container on its default bridge."""
    client = docker.from_env()
    image = ensure_image(base_recipe(), client=client).image_id
    client.containers.run(image, ["true"], remove=True)


def engines_file(tmp: Path, engines: list[tuple[str, int]], name: str = "engines.json") -> Path:
    """An ``--engines`` file of (url, capacity) pairs in ``tmp``."""
    path = tmp / name
    path.write_text(json.dumps({"engines": [{"url": u, "capacity": c} for u, c in engines]}))
    return path


def assert_no_leaks(client: docker.DockerClient, under: Path) -> None:
    left = leaked_resources(client, run_root_under=under)
    assert not any(left.values()), left


def _template_key(driver: str, image_ids: list[str]) -> str:
    version = subprocess.run(
        ["dockerd", "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return hashlib.sha256(json.dumps([driver, version, sorted(image_ids)]).encode()).hexdigest()[
        :16
    ]


def _build_template(path: Path, image_ids: list[str]) -> None:
    """Load ``image_ids`` from the system engine into an engine started for it (the harness's
    own transfer: tags and all), stop it cleanly and keep its data folder as ``path/data``."""
    shutil.rmtree(path, ignore_errors=True)  # an unfinished one
    root = Path(tempfile.mkdtemp(prefix="harness-engine2-template-", dir="/tmp"))
    engine, proc = start_engine(root)
    try:
        system, client = docker.from_env(), engine.client()
        try:
            for image_id in image_ids:
                transfer(image_id, system, client, str(root / "transfer.lock"))
        finally:
            system.close()
            client.close()
        proc.terminate()  # a clean stop: the daemon's databases are closed
        proc.wait(timeout=60)
        _reap(engine)
        path.mkdir(parents=True)
        shutil.move(root / "data", path / "data")
        (path / "complete").touch()
    finally:
        stop_engine(engine, proc)


def _prune_templates(store: Path, keep: str) -> None:
    """Remove the templates (other than ``keep``) unused for :data:`TEMPLATE_IDLE_S` and not in
    use (their lock is free)."""
    for lock_path in store.glob("*.lock"):
        key = lock_path.stem
        stamp = store / key / "complete"
        if key == keep or (
            stamp.exists() and time.time() - stamp.stat().st_mtime < TEMPLATE_IDLE_S
        ):
            continue
        with open(lock_path, "a+") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # in use
            shutil.rmtree(store / key, ignore_errors=True)  # its lock files stay (empty)


@contextlib.contextmanager
def images_template(image_ids: list[str]) -> Iterator[Path | None]:
    """The data folder of an engine that holds ``image_ids`` (made on first use, see the module
    docstring), locked shared while the context lasts; None when the test engines' storage
    driver cannot run on an overlay data root."""
    driver = engine_driver()
    if driver not in TEMPLATE_DRIVERS:
        yield None
        return
    store = cache_root() / "test-engine-images"
    store.mkdir(parents=True, exist_ok=True)
    key = _template_key(driver, image_ids)
    path = store / key
    # ``<key>.lock``, shared while in use (engines of other tests use it at the same time; a
    # pruner needs it exclusive); ``<key>.build``, exclusive while one process makes it.
    with open(store / f"{key}.lock", "a+") as in_use:
        fcntl.flock(in_use, fcntl.LOCK_SH)
        if not (path / "complete").exists():
            with open(store / f"{key}.build", "a+") as build:
                fcntl.flock(build, fcntl.LOCK_EX)
                if not (path / "complete").exists():
                    _build_template(path, image_ids)
        (path / "complete").touch()  # its last use
        _prune_templates(store, keep=key)
        yield path / "data"


@contextlib.contextmanager
def running_engine(images: Path | None = None) -> Iterator[Engine]:
    """A second engine (on ``images``, see :func:`start_engine`), stopped afterwards, and the
    system bridge checked."""
    root = Path(tempfile.mkdtemp(prefix="harness-engine2-", dir="/tmp"))
    try:
        engine, proc = start_engine(root, images)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    try:
        yield engine
    finally:
        stop_engine(engine, proc)
        system_bridge_works()


def cowork_image_ids() -> list[str]:
    """The images of a Cowork run with the default images (pg15 and runtime), built if needed."""
    from benchmarks.cowork_bench.images import ensure_image as ensure_cowork_image

    return [ensure_cowork_image("pg15").image_id, ensure_cowork_image("runtime").image_id]


@pytest.fixture
def second_engine() -> Iterator[Engine]:
    """A fresh, empty second engine for the test: every image a run needs there is moved by
    the harness."""
    with running_engine() as engine:
        yield engine


@pytest.fixture
def cowork_engine() -> Iterator[Engine]:
    """A second engine for the test that already holds the Cowork images (pg15, runtime),
    copy-on-write over the shared template (see the module docstring); the test may kill it."""
    with images_template(cowork_image_ids()) as images, running_engine(images) as engine:
        yield engine
