"""``harness cowork build-image``: build the checkout's own image (upstream's ``cowork-pack``),
then the harness's layer on it.

    harness cowork build-image --cowork-root PATH [--tag REF]

First ``cowork-pack:<short commit>`` (``--tag`` overrides) from the checkout's root
``Dockerfile``, untouched, with the checkout as the build context, on the engine
``DOCKER_HOST`` points to (the docker SDK, as ``docker build -t cowork-pack:<commit> PATH``
would). Then the derived image ``harness/cowork-pack:<base id>-<layer hash>`` (tagged by both
inputs' hashes: the checkout image's ID and the layer's content, so it is built once per
pair) adds what the harness needs (:func:`benchmarks.cowork_bench.images.harness_layer_files`):
the ``agent`` user (uid 1000), the supervisor at ``/opt/harness_mcp`` and ``mcp-call``, with
the baked-in checkout removed from ``/workspace``. Run with ``--cowork-image`` naming the
derived image, or let a run build both (``--cowork-build-image``, :func:`ensure_checkout_image`).

Both images carry the harness's built-image label (``harness.recipe``), so ``harness images
list`` shows them and ``harness images prune`` may remove them. The whole build logs go to
files (``$HARNESS_CACHE_DIR/images/logs/``); stderr gets one line per Dockerfile step.

Exit status: 0 built (the last stdout line is JSON: tag, image id, commit, log, and
``derived``); 1 a build failed (one line naming the failing step, then the log's last lines);
2 usage error (no checkout, no Dockerfile, not a git checkout, Docker unreachable).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import time
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from benchmarks.cowork_bench.images import HARNESS_LAYER_BODY, PYTHON_BIN, harness_layer_files
from harness.api import RECIPE_LABEL, TTL_LABEL, cache_dir_for

IMAGE_REPO = "cowork-pack"
COMMIT_LABEL = "harness.cowork.commit"
DIRTY_LABEL = "harness.cowork.dirty"
DERIVED_REPO = "harness/cowork-pack"
BASE_LABEL = "harness.cowork.base_image"  # the derived image's checkout image (its ID)
PYTHON_PROBE = 'import sys; print("%d.%d" % sys.version_info[:2])'
LOCK_TIMEOUT_S = 3600.0
BUILD_TIMEOUT_S = 3 * 3600  # upstream's build takes 10-15 min; a slow mirror more
TAIL_LINES = 20
PROGRESS_CHARS = 160


class BuildFailed(Exception):
    """The build failed: ``step`` (the last ``Step N/M : ...`` seen), the log's tail."""

    def __init__(self, message: str, step: str | None, tail: list[str]) -> None:
        super().__init__(message)
        self.step = step
        self.tail = tail


class DerivedResult(BaseModel):
    """The harness's layer on a checkout image."""

    model_config = ConfigDict(extra="forbid")

    tag: str
    image_id: str
    base_image_id: str
    python: str  # the version of the base image's /opt/venv/bin/python3
    built: bool  # False: the tag existed (the same base and layer)
    seconds: float
    log: str | None = None


class BuildResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tag: str
    image_id: str
    commit: str
    dirty: bool
    log: str
    seconds: float
    reused: bool = False  # a run's --cowork-build-image found the clean commit's image built
    derived: DerivedResult | None = None


def git_commit(root: Path) -> tuple[str, str, bool]:
    """``(full, short, dirty)`` of the checkout at ``root`` (ValueError when not a checkout)."""

    def git(*args: str) -> str:
        res = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                             timeout=60, check=False)  # fmt: skip
        if res.returncode != 0:
            raise ValueError(res.stderr.strip().splitlines()[-1] if res.stderr.strip() else "git")
        return res.stdout.strip()

    full = git("rev-parse", "HEAD")
    short = git("rev-parse", "--short=7", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    return full, short, dirty


def _progress(line: str) -> None:
    print(f"  {line[:PROGRESS_CHARS]}", file=sys.stderr, flush=True)


def consume(events: Iterable[dict[str, Any]], log: Any) -> tuple[str | None, str | None]:
    """Write the build's events to ``log``; return ``(error, last step)``; steps on stderr."""
    error: str | None = None
    step: str | None = None
    for event in events:
        text = event.get("stream")
        if isinstance(text, str):
            log.write(text)
            for line in text.splitlines():
                if line.startswith("Step "):
                    step = line.strip()
                    _progress(step)
        if "error" in event:
            error = str(event.get("error") or "").strip() or "unknown error"
            log.write(json.dumps(event) + "\n")
        elif "status" in event:  # base image pulls
            log.write(json.dumps(event) + "\n")
    return error, step


def log_tail(path: Path, n: int = TAIL_LINES) -> list[str]:
    with path.open(errors="replace") as fh:
        return [line.rstrip("\n") for line in deque(fh, maxlen=n)]


def build(root: Path, tag: str, log_path: Path, client: Any | None = None) -> BuildResult:
    """Build ``root/Dockerfile`` as ``tag``; raise :class:`BuildFailed` when it fails."""
    from docker.errors import APIError, BuildError, DockerException

    from harness.api import get_client, long_timeout

    full, _short, dirty = git_commit(root)
    client = client or get_client()
    labels = {RECIPE_LABEL: f"{IMAGE_REPO}@{full}", COMMIT_LABEL: full, DIRTY_LABEL: str(dirty).lower()}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    error: str | None
    step: str | None = None
    with long_timeout(client, BUILD_TIMEOUT_S) as api, log_path.open("w") as fh:
        fh.write(f"# docker build -t {tag} {root}  (commit {full}{', dirty' if dirty else ''})\n")
        try:
            events = api.build(path=str(root), dockerfile="Dockerfile", tag=tag, labels=labels,
                               rm=True, forcerm=True, pull=False, decode=True,
                               timeout=BUILD_TIMEOUT_S)  # fmt: skip
            error, step = consume(events, fh)
        except (BuildError, APIError, DockerException, OSError) as exc:
            error = f"{type(exc).__name__}: {exc}"
            fh.write(error + "\n")
    if error is not None:
        one_line = " ".join(error.split())[:300]
        where = f" at {step}" if step else ""
        raise BuildFailed(f"docker build of {tag} failed{where}: {one_line}", step,
                          log_tail(log_path))  # fmt: skip
    image_id = str(client.api.inspect_image(tag)["Id"])
    return BuildResult(tag=tag, image_id=image_id, commit=full, dirty=dirty, log=str(log_path),
                       seconds=round(time.monotonic() - started, 3))  # fmt: skip


def context_tar(dockerfile: str, files: dict[str, bytes]) -> io.BytesIO:
    """A build context: ``Dockerfile`` and ``files`` (name -> bytes)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in {"Dockerfile": dockerfile.encode(), **files}.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def image_python(client: Any, image_id: str) -> str:
    """The version (``3.10``) of ``/opt/venv/bin/python3`` in ``image_id`` (no network)."""
    from docker.errors import ContainerError, DockerException

    try:
        out = client.containers.run(image_id, ["-c", PYTHON_PROBE], entrypoint=[PYTHON_BIN],
                                    network_mode="none", user="0", remove=True,
                                    labels={TTL_LABEL: "120"})  # fmt: skip
    except (ContainerError, DockerException) as exc:
        why = " ".join(str(exc).split())[:300]
        raise BuildFailed(f"{image_id} has no working {PYTHON_BIN} (upstream's layout has "
                          f"/opt/venv): {why}", None, []) from exc  # fmt: skip
    version = out.decode(errors="replace").strip() if isinstance(out, bytes) else str(out)
    if version.count(".") != 1:
        raise BuildFailed(f"{image_id}: {PYTHON_BIN} said {version!r}, not a version", None, [])
    return version


def layer_hash(files: dict[str, bytes]) -> str:
    h = hashlib.sha256(HARNESS_LAYER_BODY.encode())
    for name, data in sorted(files.items()):
        h.update(b"\0" + name.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


def derive(base_image_id: str, client: Any | None = None) -> DerivedResult:
    """The harness's layer on ``base_image_id``, built unless its tag exists (one builder at
    a time per tag, across processes)."""
    from docker.errors import APIError, BuildError, DockerException, ImageNotFound
    from filelock import FileLock, Timeout

    from harness.api import get_client, long_timeout

    client = client or get_client()
    started = time.monotonic()
    python = image_python(client, base_image_id)
    files = harness_layer_files(python)
    digest = layer_hash(files)
    base_hex = base_image_id.split(":", 1)[-1]
    tag = f"{DERIVED_REPO}:{base_hex[:12]}-{digest[:12]}"

    def existing() -> str | None:
        try:
            return str(client.api.inspect_image(tag)["Id"])
        except ImageNotFound:
            return None

    def result(image_id: str, built: bool, log: str | None) -> DerivedResult:
        return DerivedResult(tag=tag, image_id=image_id, base_image_id=base_image_id,
                             python=python, built=built, log=log,
                             seconds=round(time.monotonic() - started, 3))  # fmt: skip

    found = existing()
    if found is not None:
        return result(found, False, None)
    cache = cache_dir_for()
    (cache / "locks").mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(cache / "locks" / f"cowork-pack-{digest[:16]}-{base_hex[:16]}.lock"))
    log_path = cache / "logs" / f"cowork-pack-harness-{base_hex[:12]}-{digest[:12]}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    labels = {RECIPE_LABEL: f"{DERIVED_REPO}@{digest}", BASE_LABEL: base_image_id}
    label_line = " ".join(f'{k}="{v}"' for k, v in labels.items())  # one step, not one each
    dockerfile = f"FROM {base_image_id}\n{HARNESS_LAYER_BODY}LABEL {label_line}\n"
    try:
        with lock.acquire(timeout=LOCK_TIMEOUT_S):
            found = existing()
            if found is not None:
                return result(found, False, None)
            error: str | None
            step: str | None = None
            with long_timeout(client, BUILD_TIMEOUT_S) as api, log_path.open("w") as fh:
                fh.write(f"# the harness's layer on {base_image_id} as {tag}\n{dockerfile}\n")
                try:
                    events = api.build(fileobj=context_tar(dockerfile, files),
                                       custom_context=True, tag=tag, rm=True,
                                       forcerm=True, pull=False, decode=True,
                                       timeout=BUILD_TIMEOUT_S)  # fmt: skip
                    error, step = consume(events, fh)
                except (BuildError, APIError, DockerException, OSError) as exc:
                    error = f"{type(exc).__name__}: {exc}"
                    fh.write(error + "\n")
    except Timeout as exc:
        raise BuildFailed(f"waited {LOCK_TIMEOUT_S:.0f}s for another build of {tag} (lock "
                          f"{lock.lock_file})", None, []) from exc  # fmt: skip
    if error is not None:
        where = f" at {step}" if step else ""
        raise BuildFailed(f"the harness's layer ({tag}) failed{where}: "
                          f"{' '.join(error.split())[:300]}", step, log_tail(log_path))  # fmt: skip
    return result(str(client.api.inspect_image(tag)["Id"]), True, str(log_path))


def reusable(client: Any, tag: str, commit: str) -> str | None:
    """The ID of ``tag`` when it is this clean commit's checkout image, else None."""
    from docker.errors import ImageNotFound

    try:
        info = client.api.inspect_image(tag)
    except ImageNotFound:
        return None
    labels = (info.get("Config") or {}).get("Labels") or {}
    if labels.get(COMMIT_LABEL) == commit and labels.get(DIRTY_LABEL) == "false":
        return str(info["Id"])
    return None


def ensure_checkout_image(root: Path, *, reuse: bool = True) -> BuildResult:
    """The checkout image (reused when ``reuse`` and a clean checkout's commit is built
    already, else built) and the harness's layer on it (:func:`derive`)."""
    from harness.api import get_client

    full, short, dirty = git_commit(root)
    tag = f"{IMAGE_REPO}:{short}"
    client = get_client()
    found = reusable(client, tag, full) if reuse and not dirty else None
    if found is not None:
        result = BuildResult(tag=tag, image_id=found, commit=full, dirty=False, log="",
                             seconds=0.0, reused=True)  # fmt: skip
    else:
        result = build(root, tag, build_log(short), client)
    return result.model_copy(update={"derived": derive(result.image_id, client)})


def build_log(short: str) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return cache_dir_for() / "logs" / f"{IMAGE_REPO}-{short}-{stamp}.log"


def build_image_command(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="harness cowork build-image",
        description="Build the Cowork checkout's own image (its root Dockerfile) as "
        "cowork-pack:<commit> on the engine DOCKER_HOST points to.",
    )
    parser.add_argument(
        "--cowork-root",
        required=True,
        metavar="PATH",
        help="a Cowork Bench checkout (a git checkout with a root Dockerfile)",
    )
    parser.add_argument(
        "--tag",
        default=None,
        metavar="REF",
        help="the image reference (default cowork-pack:<short commit>)",
    )
    args = parser.parse_args(argv)
    prog = "harness cowork build-image"
    root = Path(args.cowork_root).expanduser().resolve()
    if not (root / "Dockerfile").is_file():
        print(f"{prog}: no Dockerfile at {root}; point --cowork-root at a Cowork Bench checkout",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        _full, short, dirty = git_commit(root)
    except (ValueError, OSError, subprocess.SubprocessError) as exc:
        print(f"{prog}: {root} is not a git checkout ({exc}); the tag names its commit",
              file=sys.stderr)  # fmt: skip
        return 2
    tag = args.tag or f"{IMAGE_REPO}:{short}"
    if dirty:
        print(f"{prog}: the checkout has uncommitted changes; {tag} is labelled dirty",
              file=sys.stderr)  # fmt: skip
    from harness.api import SandboxError

    log_path = build_log(short)
    print(f"building {tag} from {root}/Dockerfile (log: {log_path})", file=sys.stderr)
    try:
        result = build(root, tag, log_path)
        print(f"built {result.tag} {result.image_id} in {result.seconds:.1f}s; the harness's "
              "layer on it:", file=sys.stderr)  # fmt: skip
        result.derived = derive(result.image_id)
    except SandboxError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except BuildFailed as exc:
        log = f"; full log: {log_path}" if exc.tail or exc.step else ""
        print(f"{prog}: {exc}{log}", file=sys.stderr)
        for line in exc.tail:
            print(f"  | {line[:PROGRESS_CHARS]}", file=sys.stderr)
        return 1
    d = result.derived
    print(f"{'built' if d.built else 'found'} {d.tag} {d.image_id} (Python {d.python}) in "
          f"{d.seconds:.1f}s; run with --cowork-image {d.tag}", file=sys.stderr)  # fmt: skip
    print(result.model_dump_json())
    return 0
