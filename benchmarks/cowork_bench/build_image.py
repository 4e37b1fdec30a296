"""``harness cowork build-image``: build the checkout's own image (upstream's ``cowork-pack``).

    harness cowork build-image --cowork-root PATH [--tag REF]

Builds ``cowork-pack:<short commit>`` (``--tag`` overrides) from the checkout's root
``Dockerfile``, with the checkout as the build context, on the engine ``DOCKER_HOST`` points
to (the docker SDK, as ``docker build -t cowork-pack:<commit> PATH`` would). The image
carries the harness's built-image label (``harness.recipe``), so ``harness images list``
shows it and ``harness images prune`` may remove it. The whole build log goes to a file
(``$HARNESS_CACHE_DIR/images/logs/``); stderr gets one line per Dockerfile step.

Exit status: 0 built (the last stdout line is JSON: tag, image id, commit, log); 1 the build
failed (one line naming the failing step, then the log's last lines); 2 usage error (no
checkout, no Dockerfile, not a git checkout, Docker unreachable).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from harness.sandbox import labels as L
from harness.sandbox.images.build import cache_dir_for

IMAGE_REPO = "cowork-pack"
COMMIT_LABEL = "harness.cowork.commit"
DIRTY_LABEL = "harness.cowork.dirty"
BUILD_TIMEOUT_S = 3 * 3600  # upstream's build takes 10-15 min; a slow mirror more
TAIL_LINES = 20
PROGRESS_CHARS = 160


class BuildFailed(Exception):
    """The build failed: ``step`` (the last ``Step N/M : ...`` seen), the log's tail."""

    def __init__(self, message: str, step: str | None, tail: list[str]) -> None:
        super().__init__(message)
        self.step = step
        self.tail = tail


class BuildResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tag: str
    image_id: str
    commit: str
    dirty: bool
    log: str
    seconds: float


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

    from harness.sandbox.client import get_client, long_timeout

    full, _short, dirty = git_commit(root)
    client = client or get_client()
    labels = {L.RECIPE: f"{IMAGE_REPO}@{full}", COMMIT_LABEL: full, DIRTY_LABEL: str(dirty).lower()}
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


def build_image_command(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="harness cowork build-image",
        description="Build the Cowork checkout's own image (its root Dockerfile) as "
        "cowork-pack:<commit> on the engine DOCKER_HOST points to.",
    )
    parser.add_argument("--cowork-root", required=True, metavar="PATH",
                        help="a Cowork Bench checkout (a git checkout with a root Dockerfile)")
    parser.add_argument("--tag", default=None, metavar="REF",
                        help="the image reference (default cowork-pack:<short commit>)")
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
    from harness.sandbox.errors import SandboxError

    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    log_path = cache_dir_for() / "logs" / f"{IMAGE_REPO}-{short}-{stamp}.log"
    print(f"building {tag} from {root}/Dockerfile (log: {log_path})", file=sys.stderr)
    try:
        result = build(root, tag, log_path)
    except SandboxError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except BuildFailed as exc:
        print(f"{prog}: {exc}; full log: {log_path}", file=sys.stderr)
        for line in exc.tail:
            print(f"  | {line[:PROGRESS_CHARS]}", file=sys.stderr)
        return 1
    print(f"built {result.tag} {result.image_id} in {result.seconds:.1f}s", file=sys.stderr)
    print(result.model_dump_json())
    return 0
