"""A run's disk ceiling for the task images it pulls (``--image-disk-ceiling-gb G``).

The images a run pulls may hold at most ``G`` GiB of an engine at once. Every worker of the
run shares one ledger per engine, ``<run_root>/.harness/images/ceiling-<engine>.json``,
read and written under an ``fcntl`` lock: each image this run brought, its size, and the
instances holding it (a reference count).

- **Before a pull** (:meth:`ImageCeiling.before_pull`, called by
  :func:`harness.sandbox.images.pull.resolve_image` under the image's pull lock): the
  image's size is the registry's compressed size (:func:`~harness.sandbox.images.pull.
  remote_size`). An image whose compressed size alone passes the ceiling is refused unpulled
  (:class:`ImageExceedsCeiling`: it cannot fit, whatever else goes). Otherwise the pull
  reserves twice that size (unpacked layers are larger; the pull's free-disk check counts
  the same), at most the whole ceiling; an unknown size (a registry that does not say)
  reserves nothing and is admitted only while the run's images are under the ceiling
  (``size_from: unknown``: the pull's free-disk check then guards the disk alone). When the
  run's images and the reservation would pass the ceiling, this run's idle images (no
  instance holds them) are removed first, least recently used first; if that is not enough, the pull waits, polling the ledger, for the
  other workers' instances to end and release theirs (``image_ceiling_full`` when the wait
  passes its bound, or when no other instance holds anything that could be released).
- **After the pull**: the image counts the larger of the reservation and the engine's own
  size of it (unpacked layers are larger than the registry's compressed ones; an image
  that unpacks to less than its reservation stays counted at the reservation until its
  release, the safe side of the ceiling).
- **At the instance's end** (:meth:`ImageCeiling.release`, after its sandboxes are removed,
  so after its eval): the instance lets go; an image no instance of the run holds any more
  is removed (its tags, never by force). An image a container still uses (a sandbox kept
  for a reattach, ``--keep-sandboxes``) is not removed: it stays in the ledger, idle, and
  later evictions look again.

Only images this run brought are ever counted or removed: an image whose reference (or the
content it pulled) was on the engine before its pull is recorded as ``preexisting`` and left
alone, as are images other runs pulled (each run has its own ledger). Sizes count whole
images, shared layers included: an overestimate when task images share base layers.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from docker.errors import APIError, ImageNotFound, NotFound
from pydantic import BaseModel, ConfigDict, Field

from harness.core.errors import InfraError
from harness.core.fsutil import atomic_write_text

GIB = 1 << 30
UNPACK_FACTOR = 2  # a pull reserves this many times the image's compressed size
POLL_S = 0.5
PROGRESS_EVERY_S = 10.0
Progress = Callable[[str], None]


class ImageExceedsCeiling(InfraError):
    """An image bigger than the whole ceiling, refused before its pull.

    Infrastructure, not the agent's failure: no agent ran and nothing of the task was
    judged; the run's own disk setting stopped it. A second try in the same run cannot fit it
    (the ceiling is fixed for a run), so the runner does not retry it
    (``harness.runner.worker.NOT_RETRIED_CODES``); a resume retries it as any infrastructure
    failure: with a higher ``--image-disk-ceiling-gb`` (not part of the run's configuration)
    it runs, with the same one it is refused again at no cost (no pull, no agent), and
    ``--max-recovery-generations`` bounds how often."""

    reason_code = "image_exceeds_ceiling"


class CeilingFull(InfraError):
    """No room under the ceiling in time: the run's other instances held it past the wait's
    bound, or nothing that holds it will let go (an image kept with its sandbox). Another
    try may find room: retried as infrastructure."""

    reason_code = "image_ceiling_full"


class Holder(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str  # the instance (its run key)
    pid: int  # its worker process: a dead worker's holds are dropped


class HeldImage(BaseModel):
    """One image this run brought onto the engine."""

    model_config = ConfigDict(extra="forbid")

    source: str  # the reference pulled (the ledger's key)
    ref: str  # the canonical reference it is tagged with too
    image_id: str | None = None  # None while its pull runs
    bytes: int  # the registry's size until pulled, then the engine's
    holders: list[Holder] = Field(default_factory=list)
    last_used_unix: float
    busy: str | None = None  # why it was not removed when last released


class CeilingLedger(BaseModel):
    """``.harness/images/ceiling-<engine>.json``: the run's pulled images on one engine."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: Literal["harness.image_ceiling.v1"] = Field(
        default="harness.image_ceiling.v1", alias="schema")
    ceiling_bytes: int
    images: dict[str, HeldImage] = Field(default_factory=dict)
    peak_bytes: int = 0  # the most the run's images held at once (estimates included)

    def held_bytes(self) -> int:
        return sum(img.bytes for img in self.images.values())


class EvictedImage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ref: str
    id: str | None = None
    bytes: int


class CeilingRecord(BaseModel):
    """What the ceiling did with one instance's image (the row's
    ``details.engine.image.ceiling``)."""

    model_config = ConfigDict(extra="forbid")

    ceiling_bytes: int
    counted: bool  # this run brought the image: counted, and removed when released
    size_bytes: int | None = None  # compressed (registry) or the engine's (held), per size_from
    reserved_bytes: int | None = None  # what the pull reserved (twice that, at most the ceiling)
    size_from: Literal["registry", "engine", "unknown"] | None = None
    held_bytes_before: int | None = None  # the run's other images when this one was admitted
    waited_s: float | None = None
    evicted: list[EvictedImage] = Field(default_factory=list)
    admitted_unix: float | None = None
    released_unix: float | None = None
    removed_after_eval: bool | None = None  # set when the instance ends
    freed_bytes: int | None = None
    kept_reason: str | None = None  # why it was not removed: preexisting, held, in use


def gib(n: int | float) -> str:
    return f"{n / GIB:.3g} GiB"


def given_gb(n: int) -> str:
    """A ceiling as the option gave it (``0.001``, not the rounded bytes' ``0.000999999``)."""
    return f"{round(n / GIB, 6):g}"


def engine_key(api: Any) -> str:
    """The engine's own identity, hashed: one ledger per engine. Its daemon ID, host name
    and data root (two daemons on one host may share an ID, never a data root). Not the
    client's URL: docker-py names every ``unix://`` socket (and so every ``ssh://`` engine's
    tunnel) ``http+docker://localhost``, which would make engines share one ceiling."""
    info = api.info()
    who = "\0".join(str(info.get(k, "")) for k in ("ID", "Name", "DockerRootDir"))
    return hashlib.sha256(who.encode()).hexdigest()[:12]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ImageCeiling:
    """One instance's view of the run's ceiling on one engine."""

    def __init__(self, api: Any, folder: Path, ceiling_bytes: int, holder: str, *,
                 wait_s: float | None = None, progress: Progress | None = None) -> None:
        self.api = api
        self.ceiling = int(ceiling_bytes)
        self.holder = Holder(key=holder, pid=os.getpid())
        self.wait_s = wait_s
        self.progress = progress
        self.path = folder / f"ceiling-{engine_key(api)}.json"
        self._before_ids: set[str] = set()  # the engine's image IDs before the pull

    # the ledger ------------------------------------------------------------------------
    @contextlib.contextmanager
    def _ledger(self) -> Iterator[CeilingLedger]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(str(self.path) + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                read = self.path.read_text()
                ledger = CeilingLedger.model_validate_json(read)
            except (OSError, ValueError):
                read, ledger = "", CeilingLedger(ceiling_bytes=self.ceiling)
            _drop_dead(ledger)
            yield ledger
            ledger.peak_bytes = max(ledger.peak_bytes, ledger.held_bytes())
            text = ledger.model_dump_json(indent=1, by_alias=True)
            if text != read:  # a wait's polls write nothing
                atomic_write_text(self.path, text)
        finally:
            os.close(fd)

    def hold_existing(self, source: str) -> CeilingRecord | None:
        """Hold an image this run brought and still has (no pull: present); None if none."""
        with self._ledger() as ledger:
            entry = ledger.images.get(source)
            if entry is None or entry.image_id is None:
                return None
            entry.holders.append(self.holder)
            entry.last_used_unix = time.time()
            entry.busy = None
            return CeilingRecord(ceiling_bytes=self.ceiling, counted=True,
                                 size_bytes=entry.bytes, size_from="engine",
                                 admitted_unix=round(time.time(), 3), waited_s=0.0,
                                 held_bytes_before=ledger.held_bytes() - entry.bytes)

    # before and after a pull -------------------------------------------------------------
    def before_pull(self, ref: str, source: str, size: int | None) -> CeilingRecord:
        """Room for ``source`` (``size`` bytes, None: unknown) under the ceiling, reserved:
        refused, evicting, or waiting as the module says. Call :meth:`after_pull` or
        :meth:`abort` once the pull ended."""
        if _present(self.api, ref) or _present(self.api, source):
            return self.preexisting()
        if size is not None and size > self.ceiling:
            named = ref if source == ref else f"{ref} (from {source})"
            raise ImageExceedsCeiling(
                f"image {named} ({gib(size)} compressed) exceeds --image-disk-ceiling-gb "
                f"{given_gb(self.ceiling)}: refused before pulling; raise "
                f"the ceiling above {size / GIB:.3g} (or free disk for it) and resume")
        reserve = min(UNPACK_FACTOR * size, self.ceiling) if size is not None else 0
        record = CeilingRecord(ceiling_bytes=self.ceiling, counted=True, size_bytes=size,
                               reserved_bytes=reserve,
                               size_from="registry" if size is not None else "unknown")
        self._before_ids = _image_ids(self.api)
        return self._reserve(ref, source, record)

    def preexisting(self) -> CeilingRecord:
        return CeilingRecord(ceiling_bytes=self.ceiling, counted=False,
                             kept_reason="preexisting: on the engine before this run pulled it")

    def _reserve(self, ref: str, source: str, record: CeilingRecord) -> CeilingRecord:
        size = record.reserved_bytes or 0
        unknown = record.size_bytes is None
        started = time.monotonic()
        noted = started
        while True:
            with self._ledger() as ledger:
                held = ledger.held_bytes()
                if not _fits(held, size, self.ceiling, unknown):
                    need = held + size - self.ceiling + (1 if unknown else 0)
                    record.evicted += self._evict(ledger, need)
                    held = ledger.held_bytes()
                if _fits(held, size, self.ceiling, unknown):
                    now = time.time()
                    ledger.images[source] = HeldImage(source=source, ref=ref, bytes=size,
                                                      holders=[self.holder],
                                                      last_used_unix=now)
                    record.held_bytes_before = held
                    record.admitted_unix = round(now, 3)
                    record.waited_s = round(time.monotonic() - started, 3)
                    return record
                others = _held_by_others(ledger, self.holder.key)
            waited = time.monotonic() - started
            why = (f"the run's images hold {gib(held)} of --image-disk-ceiling-gb "
                   f"{given_gb(self.ceiling)}; {source} needs {gib(size)} more")
            if not others:
                raise CeilingFull(f"no room to pull {source}: {why}, and no other instance "
                                  "of the run holds an image it will release (a sandbox kept "
                                  "for a reattach keeps its image); raise the ceiling")
            if self.wait_s is not None and waited > self.wait_s:
                raise CeilingFull(f"no room to pull {source} after waiting {waited:.0f} s: "
                                  f"{why} (held by {', '.join(others[:3])}); raise the ceiling "
                                  "or --phase-timeout pull=SECONDS")
            if self.progress is not None and time.monotonic() - noted >= PROGRESS_EVERY_S:
                noted = time.monotonic()
                self.progress(f"waiting {waited:.0f} s for disk: {why}, held by "
                              f"{', '.join(others[:3])}")
            time.sleep(POLL_S)

    def after_pull(self, source: str, record: CeilingRecord,
                   attrs: dict[str, Any]) -> CeilingRecord:
        """The pulled image's ID and engine size in the ledger (content that was on the
        engine before the pull: not this run's, released from the ledger)."""
        image_id = str(attrs["Id"])
        if image_id in self._before_ids:
            self.abort(source)
            return self.preexisting()
        with self._ledger() as ledger:
            entry = ledger.images.get(source)
            if entry is not None:
                entry.image_id = image_id
                entry.bytes = max(entry.bytes, int(attrs.get("Size") or 0))
        return record

    def abort(self, source: str) -> None:
        """The pull failed: its reservation goes (nothing of it is held)."""
        with self._ledger() as ledger:
            entry = ledger.images.get(source)
            if entry is not None and entry.image_id is None:
                del ledger.images[source]

    # the instance's end ------------------------------------------------------------------
    def release(self) -> dict[str, CeilingRecord]:
        """Let go of every image this instance holds; remove those no instance holds any
        more. Per reference: what happened (``removed_after_eval``, ``kept_reason``)."""
        out: dict[str, CeilingRecord] = {}
        with self._ledger() as ledger:
            for source, entry in list(ledger.images.items()):
                mine = [h for h in entry.holders if h == self.holder]
                if not mine:
                    continue
                entry.holders = [h for h in entry.holders if h != self.holder]
                entry.last_used_unix = time.time()
                rec = CeilingRecord(ceiling_bytes=self.ceiling, counted=True,
                                    released_unix=round(time.time(), 3))
                if entry.holders:
                    rec.removed_after_eval = False
                    rec.kept_reason = (f"held by {len(entry.holders)} other instance(s) of "
                                       "the run: the last one removes it")
                elif entry.image_id is not None:
                    removed = _remove(self.api, entry)
                    rec.removed_after_eval = removed
                    rec.freed_bytes = entry.bytes if removed else 0
                    rec.kept_reason = None if removed else entry.busy
                    if removed:
                        del ledger.images[source]
                out[source] = rec
        return out

    def _evict(self, ledger: CeilingLedger, need: int) -> list[EvictedImage]:
        """Remove this run's idle images, least recently used first, until ``need`` bytes
        are free (or none is left that can go)."""
        out: list[EvictedImage] = []
        idle = sorted((e for e in ledger.images.values()
                       if not e.holders and e.image_id is not None),
                      key=lambda e: e.last_used_unix)
        for entry in idle:
            if need <= 0:
                break
            if _remove(self.api, entry):
                del ledger.images[entry.source]
                out.append(EvictedImage(ref=entry.source, id=entry.image_id, bytes=entry.bytes))
                need -= entry.bytes
        return out


def _fits(held: int, size: int, ceiling: int, unknown: bool) -> bool:
    return held < ceiling if unknown else held + size <= ceiling


def _held_by_others(ledger: CeilingLedger, key: str) -> list[str]:
    return [f"{e.source} ({', '.join(h.key for h in e.holders)})"
            for e in ledger.images.values() if any(h.key != key for h in e.holders)]


def _drop_dead(ledger: CeilingLedger) -> None:
    """A crashed worker's holds go; a reservation whose pull died with it goes too."""
    for source, entry in list(ledger.images.items()):
        entry.holders = [h for h in entry.holders if _alive(h.pid)]
        if entry.image_id is None and not entry.holders:
            del ledger.images[source]


def _present(api: Any, ref: str) -> bool:
    try:
        api.inspect_image(ref)
    except (ImageNotFound, NotFound):
        return False
    return True


def _image_ids(api: Any) -> set[str]:
    return {str(i) for i in api.images(quiet=True)}


def _remove(api: Any, entry: HeldImage) -> bool:
    """Remove an image this run brought (its tags; never by force): not while a container
    uses it (``entry.busy`` says which)."""
    users = api.containers(all=True, filters={"ancestor": entry.image_id})
    if users:
        names = [str((c.get("Names") or ["?"])[0]).lstrip("/") for c in users]
        entry.busy = f"in use by container {', '.join(names[:3])}"
        return False
    try:
        for tag in dict.fromkeys([entry.source, entry.ref]):
            with contextlib.suppress(ImageNotFound, NotFound):
                api.remove_image(tag)
    except APIError as exc:
        entry.busy = f"removal failed: {str(getattr(exc, 'explanation', None) or exc)[:200]}"
        return False
    entry.busy = None
    return True


__all__ = ["CeilingFull", "CeilingLedger", "CeilingRecord", "EvictedImage", "ImageCeiling",
           "ImageExceedsCeiling"]
