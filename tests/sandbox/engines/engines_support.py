"""A second Docker engine for the multi-engine tests, started and stopped by the tests.

``unshare -n dockerd`` with its own empty ``--config-file``, ``--data-root``,
``--exec-root``, ``--pidfile``, unix socket, ``--bridge none`` and its own network
namespace: started in the host's namespace with ``--bridge none``, a second daemon deletes
the system engine's ``docker0``. Storage: ``fuse-overlayfs`` when the host engine uses it
(containers start in 0.5 s; ``vfs`` copies the whole image per container, 8.6 s for the
283 MB base image here), else ``vfs``; ``HARNESS_TEST_ENGINE_DRIVER`` overrides. Images
reach it through the harness itself (``docker save | docker load`` on first use).

Import it as ``tests.sandbox.engines.engines_support`` and use :func:`second_engine` (module
scoped: stopped after the module's last test, not at the end of the session) in a test module.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from harness.sandbox.cleanup import leaked_resources
from harness.sandbox.images.build import base_recipe, ensure_image

START_TIMEOUT_S = 60


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


def _driver() -> str:
    wanted = os.environ.get("HARNESS_TEST_ENGINE_DRIVER")
    if wanted:
        return wanted
    host = docker.from_env().info().get("Driver")
    return "fuse-overlayfs" if host == "fuse-overlayfs" and shutil.which("fuse-overlayfs") \
        else "vfs"


def start_engine(root: Path) -> tuple[Engine, subprocess.Popen[bytes]]:
    """Start a second dockerd under ``root``; return once it answers."""
    (root / "daemon.json").write_text("{}\n")
    sock = root / "docker.sock"
    argv = ["unshare", "-n", "dockerd", "--config-file", str(root / "daemon.json"),
            "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
            "--pidfile", str(root / "docker.pid"), "-H", f"unix://{sock}",
            "--storage-driver", _driver(), "--bridge", "none", "--iptables=false",
            "--ip-masq=false"]
    log = open(root / "dockerd.log", "wb")  # noqa: SIM115 (closed with the process)
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    log.close()
    url = f"unix://{sock}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"second dockerd exited {proc.returncode}: "
                               f"{(root / 'dockerd.log').read_text()[-2000:]}")
        if sock.exists():
            try:
                if docker.DockerClient(base_url=url, timeout=5).ping():
                    return Engine(url, root, proc.pid), proc
            except docker.errors.DockerException:
                pass
        time.sleep(0.2)
    proc.kill()
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
    subprocess.run(["umount", "-R", "-l", str(engine.root / "data")], capture_output=True,
                   check=False)
    subprocess.run(["umount", "-R", "-l", str(engine.root / "exec")], capture_output=True,
                   check=False)


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
    subprocess.run(["sh", "-c", 'rm -rf --one-file-system -- "$1" >/dev/null 2>&1 &', "sh",
                    str(engine.root)], check=True)


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


@pytest.fixture(scope="module")
def second_engine() -> Iterator[Engine]:
    """A fresh second engine for the module (stopped after its last test); the system
    bridge is checked afterwards."""
    root = Path(tempfile.mkdtemp(prefix="harness-engine2-", dir="/tmp"))
    engine, proc = start_engine(root)
    try:
        yield engine
    finally:
        stop_engine(engine, proc)
        system_bridge_works()


def _stop_daemon(engine: Engine) -> None:
    """Stop the engine's daemon (SIGTERM, then SIGKILL), keeping its folder and images."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(engine.pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and Path(f"/proc/{engine.pid}").exists():
        with contextlib.suppress(ChildProcessError):
            os.waitpid(engine.pid, os.WNOHANG)
        time.sleep(0.1)
    engine.kill()
    _reap(engine)


def take_over(engine: Engine) -> tuple[Engine, subprocess.Popen[bytes]]:
    """A new daemon on ``engine``'s folder, for a test that kills it: the module's engine is
    stopped first, and the images it already holds stay (no second ``docker save | docker
    load`` of the same images). Hand it back with :func:`give_back`."""
    _stop_daemon(engine)
    return start_engine(engine.root)


def give_back(engine: Engine, taken: Engine, proc: subprocess.Popen[bytes]) -> None:
    """After :func:`take_over`: stop the taken daemon (dead or alive) and start the module's
    engine again on its folder, updating ``engine`` in place (its URL stays; its pid is the
    new daemon's, which the module fixture's teardown finds by the folder's path)."""
    if proc.poll() is None:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
    taken.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    _reap(taken)
    again, _ = start_engine(engine.root)
    engine.url, engine.pid = again.url, again.pid
