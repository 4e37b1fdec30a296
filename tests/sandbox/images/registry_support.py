"""A real registry for the pull tests: Debian's ``docker-registry`` (distribution 2.8) on a
loopback port, storage in a temporary folder, access log kept to count pulls.

The engine treats 127.0.0.0/8 registries as insecure (plain HTTP) by default, so no daemon
configuration is needed.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

CONFIG = """\
version: 0.1
log:
  level: info
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
"""


@dataclass
class Registry:
    host: str  # 127.0.0.1:PORT, the value for --image-mirror
    log: Path
    proc: subprocess.Popen[bytes]

    def docker_pulls(self, repository: str) -> int:
        """Pulls by tag made by a Docker engine: each starts by resolving the tag's manifest
        (``HEAD`` or ``GET /v2/<repository>/manifests/<tag>``), also when every layer is
        already local; the harness's own size probe is not a Docker engine and not counted."""
        pattern = re.compile(
            rf'"(HEAD|GET) /v2/{re.escape(repository)}/manifests/(?!sha256:)[^ ]+ HTTP/1\.1" '
            r'200 .*"docker/')
        return sum(1 for line in self.log.read_bytes().decode(errors="replace").splitlines()
                   if pattern.search(line))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_registry(folder: Path) -> Iterator[Registry]:
    binary = shutil.which("docker-registry")
    if binary is None:
        raise RuntimeError("docker-registry is not installed: apt-get install -y docker-registry "
                           "(scripts/setup.sh does it)")
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = folder / "config.yml"
    config.write_text(CONFIG.format(root=folder / "data", port=port))
    log = folder / "registry.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([binary, "serve", str(config)], stdout=out,
                                stderr=subprocess.STDOUT)
    registry = Registry(host=f"127.0.0.1:{port}", log=log, proc=proc)
    try:
        for _ in range(300):
            try:
                if httpx.get(f"http://{registry.host}/v2/", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"docker-registry exited: {log.read_text()[-500:]}")
            time.sleep(0.1)
        else:
            raise RuntimeError("docker-registry did not answer on /v2/ within 30 s")
        yield registry
    finally:
        registry.stop()


def push(source_image: str, target: str) -> str:
    """Tag ``source_image`` as ``target``, push it, drop the local tag; return the digest."""
    subprocess.run(["docker", "tag", source_image, target], check=True, capture_output=True)
    out = subprocess.run(["docker", "push", target], check=True, capture_output=True, text=True)
    subprocess.run(["docker", "rmi", target], check=True, capture_output=True)
    match = re.search(r"digest: (sha256:[0-9a-f]{64})", out.stdout)
    if match is None:
        raise RuntimeError(f"no digest in docker push output: {out.stdout[-300:]}")
    return match.group(1)
