"""Task images from a registry: pulled on demand, once per run, pinned by digest.

``resolve_image(client, "programbench/x:task_cleanroom_v6", settings)`` returns an
:class:`ImageRecord` (what ran: canonical reference, where it was pulled from, repo digest,
image ID) after applying the pull policy:

* ``missing`` (default): use the local image when present, else pull;
* ``always``: pull once per run (a marker under the run's state folder remembers it, so two
  xdist workers that need the same image make exactly one pull);
* ``never``: use the local image, or fail with ``image_missing``.

``--image-mirror HOST[:PORT]`` pulls ``HOST:PORT/<repository>:<tag>`` instead and tags the
result with the canonical reference too (the official scorer looks the canonical name up).
A pinned digest (``--image-digest-file``) pulls ``<repository>@<digest>`` and checks it.

Across workers: one file lock per image (one pull per image) and at most ``jobs``
concurrent pulls (slot locks). Before each pull the Docker data root must have room for the
image (its compressed size from the registry when known, times two for unpacking) plus
``min_free_gb``. Registry and network errors are retried with back-off; a pull that still
fails is ``infra_failed`` with ``image_pull_failed`` and the registry's message.

With an :class:`~harness.sandbox.images.ceiling.ImageCeiling` (``--image-disk-ceiling-gb``)
the pull is admitted under the run's disk ceiling first (refused, evicting or waiting: see
that module) and the record says what the ceiling did (``ceiling``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from filelock import FileLock, Timeout
from pydantic import BaseModel, ConfigDict

from harness.core.errors import InfraError
from harness.sandbox.errors import ImageMissing
from harness.sandbox.images.ceiling import CeilingRecord, ImageCeiling
from harness.sandbox.images.inventory import record_use
from harness.sandbox.images.pull_settings import POLICIES as POLICIES
from harness.sandbox.images.pull_settings import PullPolicy as PullPolicy
from harness.sandbox.images.pull_settings import PullSettings, mirror_ref, split_ref

Progress = Callable[[str], None]
LABEL_PULLED = "harness.pulled"


class ImagePullFailed(InfraError):
    reason_code = "image_pull_failed"


class ImageRecord(BaseModel):
    """One instance's image, as recorded in its row and in the manifest."""

    model_config = ConfigDict(extra="forbid")

    ref: str  # canonical reference (repository:tag)
    pulled_from: str | None = None  # the reference actually pulled (mirror or canonical)
    id: str  # image ID (sha256:...)
    repo_digest: str | None = None  # sha256:... of the manifest the registry served
    pulled: bool = False  # pulled by this process (not found locally, or policy always)
    pull_s: float | None = None
    size_bytes: int | None = None
    ceiling: CeilingRecord | None = None  # --image-disk-ceiling-gb: what it did with the image


def _digest_of(attrs: dict[str, Any], repo: str) -> str | None:
    for item in attrs.get("RepoDigests") or []:
        name, _, digest = str(item).partition("@")
        if name == repo and digest:
            return digest
    return None


def _local(api: docker.APIClient, ref: str) -> dict[str, Any] | None:
    try:
        return dict(api.inspect_image(ref))
    except (ImageNotFound, NotFound):
        return None


def _key(ref: str) -> str:
    return hashlib.sha256(ref.encode()).hexdigest()[:20]


class _Slots:
    """At most ``n`` holders across processes: one lock file per slot."""

    def __init__(self, folder: Path, n: int) -> None:
        self.locks = [FileLock(str(folder / f"pull-slot-{i}.lock")) for i in range(max(1, n))]
        self.held: FileLock | None = None

    def __enter__(self) -> _Slots:
        while True:
            for lock in self.locks:
                try:
                    lock.acquire(timeout=0)
                except Timeout:
                    continue
                self.held = lock
                return self
            time.sleep(0.2)

    def __exit__(self, *exc: object) -> None:
        if self.held is not None:
            self.held.release()


_ACCEPT = ", ".join([
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
])


def _registry_url(ref: str) -> tuple[str, str, str]:
    """``(base URL, repository path, tag or digest)`` of a reference, Docker Hub by default."""
    name, sep, digest = ref.partition("@")
    repo, tag = (name, digest) if sep else split_ref(ref)
    first, _, rest = repo.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        host, path = first, rest
    else:
        host, path = "registry-1.docker.io", repo if "/" in repo else f"library/{repo}"
    local = host.split(":")[0] in ("localhost", "127.0.0.1", "::1") or host.startswith("127.")
    return f"{'http' if local else 'https'}://{host}", path, tag


def remote_size(ref: str, timeout_s: float = 10.0) -> int | None:
    """Compressed size of ``ref`` (layers + config) from the registry's manifest, or None.

    Anonymous access only (a public registry's token flow, or a mirror without auth); any
    failure means "unknown" and the disk check falls back to ``min_free_gb`` alone.
    """
    import httpx

    base, path, tag = _registry_url(ref)
    try:
        with httpx.Client(timeout=timeout_s, follow_redirects=True) as http:
            headers = {"Accept": _ACCEPT}
            url = f"{base}/v2/{path}/manifests/{tag}"
            resp = http.get(url, headers=headers)
            if resp.status_code == 401:
                token = _anonymous_token(http, resp.headers.get("www-authenticate", ""))
                if token is None:
                    return None
                headers["Authorization"] = f"Bearer {token}"
                resp = http.get(url, headers=headers)
            resp.raise_for_status()
            doc = resp.json()
            if "manifests" in doc:  # an index: the linux/amd64 entry
                entry = next((m for m in doc["manifests"]
                              if (m.get("platform") or {}).get("architecture") == "amd64"),
                             None)
                if entry is None:
                    return None
                resp = http.get(f"{base}/v2/{path}/manifests/{entry['digest']}", headers=headers)
                resp.raise_for_status()
                doc = resp.json()
            layers = doc.get("layers") or []
            return int(sum(int(x.get("size", 0)) for x in layers)
                       + int((doc.get("config") or {}).get("size", 0)))
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None


def _anonymous_token(http: Any, challenge: str) -> str | None:
    if not challenge.lower().startswith("bearer "):
        return None
    fields = dict(
        part.split("=", 1) for part in challenge[7:].split(",") if "=" in part
    )
    realm = fields.pop("realm", "").strip('"')
    if not realm:
        return None
    resp = http.get(realm, params={k: v.strip('"') for k, v in fields.items()})
    if resp.status_code != 200:
        return None
    body = resp.json()
    token = body.get("token") or body.get("access_token")
    return str(token) if token else None


def remote_digest(api: docker.APIClient, ref: str) -> str | None:
    """The manifest digest the registry serves for ``ref`` now (None when unreachable)."""
    try:
        info = api.inspect_distribution(ref)
    except (APIError, DockerException, OSError):
        return None
    digest = (info.get("Descriptor") or {}).get("digest")
    return str(digest) if digest else None


def check_disk(api: docker.APIClient, need_bytes: int, min_free_gb: float, ref: str) -> None:
    try:
        root = str(api.info().get("DockerRootDir") or "/var/lib/docker")
        free = shutil.disk_usage(root).free
    except (APIError, OSError):
        return  # a remote engine: its disk is not ours to measure
    want = need_bytes + int(min_free_gb * (1 << 30))
    if free < want:
        raise InfraError(
            f"not enough disk to pull {ref}: {free / 2**30:.1f} GiB free on {root}, need "
            f"{want / 2**30:.1f} GiB (image + --pull-min-free-gb); free space or prune images "
            "(`harness images prune`)",
            "disk_low",
        )


def _pull_once(
    api: docker.APIClient, what: str, progress: Progress | None
) -> None:
    # docker-py splits "repo:tag" and "repo@sha256:..." itself (the digest goes as the tag)
    if progress is not None:
        progress(f"pulling {what}")
    stream = api.pull(what, stream=True, decode=True)
    layers: dict[str, tuple[int, int]] = {}
    last = 0.0
    for event in stream:
        if "error" in event:
            raise APIError(str(event.get("error")))
        detail = event.get("progressDetail") or {}
        layer = event.get("id")
        if layer and detail.get("total"):
            layers[str(layer)] = (int(detail.get("current") or 0), int(detail["total"]))
        now = time.monotonic()
        if progress is not None and now - last > 1.0:
            last = now
            done = sum(c for c, _ in layers.values())
            total = sum(t for _, t in layers.values())
            progress(f"pulling {what}: {done / 2**20:.0f}/{total / 2**20:.0f} MiB, "
                     f"{len(layers)} layers")


def _pull(api: docker.APIClient, what: str, settings: PullSettings,
          progress: Progress | None) -> float:
    started = time.monotonic()
    last_error = ""
    for attempt in range(settings.retries + 1):
        try:
            _pull_once(api, what, progress)
            return time.monotonic() - started
        except (APIError, DockerException, OSError) as exc:
            message = str(getattr(exc, "explanation", None) or exc).strip()
            last_error = message.splitlines()[-1] if message else type(exc).__name__
            if _permanent(message) or attempt == settings.retries:
                break
            time.sleep(settings.backoff_s * (2**attempt))
    raise ImagePullFailed(f"pulling {what} failed after {attempt + 1} attempt(s): {last_error}")


def _permanent(message: str) -> bool:
    """Errors a retry cannot fix: the registry answered that the reference does not exist."""
    text = message.lower()
    return "manifest unknown" in text or "not found: manifest" in text or "unauthorized" in text


def _tag(api: docker.APIClient, image_id: str, ref: str) -> None:
    repo, tag = split_ref(ref)
    api.tag(image_id, repo, tag=tag)


def _record(api: docker.APIClient, ref: str, source: str, attrs: dict[str, Any], pulled: bool,
            pull_s: float | None) -> ImageRecord:
    source_repo = source.partition("@")[0] if "@" in source else split_ref(source)[0]
    digest = _digest_of(attrs, source_repo) or _digest_of(attrs, split_ref(ref)[0])
    return ImageRecord(ref=ref, pulled_from=source if pulled or source != ref else None,
                       id=str(attrs["Id"]), repo_digest=digest, pulled=pulled,
                       pull_s=None if pull_s is None else round(pull_s, 3),
                       size_bytes=attrs.get("Size"))


def resolve_image(
    client: docker.DockerClient,
    ref: str,
    settings: PullSettings,
    *,
    progress: Progress | None = None,
    ceiling: ImageCeiling | None = None,
) -> ImageRecord:
    """Make ``ref`` present under its canonical name according to ``settings``; record it.
    With ``ceiling``, a pull is admitted under the run's disk ceiling and the image held
    (the caller releases it with :meth:`ImageCeiling.release` when the instance ends)."""
    api = client.api
    source = mirror_ref(ref, settings.mirror)
    if settings.pin:
        source = f"{split_ref(source)[0]}@{settings.pin}"
    lock_dir = settings.lock_dir
    if lock_dir is None:
        return _resolve_locked(api, ref, source, settings, progress, None, ceiling)
    lock_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock_dir / f"pull-{_key(source)}.lock")):
        return _resolve_locked(api, ref, source, settings, progress, lock_dir, ceiling)


def _resolve_locked(api: docker.APIClient, ref: str, source: str, settings: PullSettings,
                    progress: Progress | None, lock_dir: Path | None,
                    ceiling: ImageCeiling | None) -> ImageRecord:
    marker = lock_dir / f"pulled-{_key(source)}.json" if lock_dir is not None else None
    # An image this run pulled and still has is held first: no other instance removes it now
    held = ceiling.hold_existing(source) if ceiling is not None else None
    # With a pin, only the pinned content counts as present; otherwise the canonical tag.
    local = _local(api, source) if settings.pin else _local(api, ref) or _local(api, source)
    already = marker is not None and marker.is_file()
    need_pull = (settings.policy == "always" and not already) or (
        settings.policy == "missing" and local is None)
    if settings.policy == "never" and local is None:
        raise ImageMissing(
            f"image {ref} is not on this machine and --pull never forbids pulling it: "
            f"pull it first (`pytest ... --dry-run --pull always`) or allow pulls")
    pull_s: float | None = None
    if need_pull:
        local, pull_s, held = _pull_admitted(api, ref, source, settings, progress, lock_dir,
                                             ceiling, held)
        if marker is not None:
            marker.write_text(json.dumps({"source": source, "id": local["Id"]}))
    assert local is not None
    if source != ref:
        _tag(api, str(local["Id"]), ref)  # the scorer looks the canonical name up
    record = _record(api, ref, source, local, need_pull, pull_s)
    if ceiling is not None:
        record.ceiling = held or ceiling.preexisting()
    record_use(record.id, [ref, source], pulled=need_pull)
    if settings.pin and record.repo_digest != settings.pin:
        raise ImageMissing(
            f"image {ref} has digest {record.repo_digest}, not the pinned {settings.pin}")
    return record


def _pull_admitted(api: docker.APIClient, ref: str, source: str, settings: PullSettings,
                   progress: Progress | None, lock_dir: Path | None,
                   ceiling: ImageCeiling | None, held: CeilingRecord | None
                   ) -> tuple[dict[str, Any], float, CeilingRecord | None]:
    """Pull ``source`` (admitted under the ceiling first, when there is one): its
    attributes, the pull's seconds, and what the ceiling did."""
    size = remote_size(source)
    admitted = held
    if ceiling is not None and held is None:  # a new image for the run: room first
        admitted = ceiling.before_pull(ref, source, size)
    reserved = ceiling is not None and held is None and admitted is not None and admitted.counted
    try:
        check_disk(api, 2 * (size or 0), settings.min_free_gb, source)
        if lock_dir is not None:
            with _Slots(lock_dir, settings.jobs):
                pull_s = _pull(api, source, settings, progress)
        else:
            pull_s = _pull(api, source, settings, progress)
        local = _local(api, source)
        if local is None:
            raise ImagePullFailed(f"pulled {source} but the engine does not list it")
    except BaseException:
        if reserved and ceiling is not None:
            ceiling.abort(source)
        raise
    if reserved and ceiling is not None and admitted is not None:
        admitted = ceiling.after_pull(source, admitted, local)
    return local, pull_s, admitted
