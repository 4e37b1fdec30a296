"""How many instances an engine takes, from what it has: CPUs, free memory, free disk.

**Reading an engine** (:func:`read_resources`): ``/info`` gives its CPUs (``NCPU``: the
daemon's CPU affinity) and memory; a probe container (a static program alone in a tiny
image, ``engine_probe.c``, imported on the engine the first time, run with no network,
read-only, as nobody, labelled with the run) reads the host's ``MemAvailable``, its memory
stall share (PSI, when the kernel has it) and the free bytes of the file system under the
container's root, which is the engine's data root. A probe that cannot run leaves those
unknown (recorded): the engine is then sized by ``/info`` alone.

**Admission** (:func:`admitted_capacity`): an instance is sized by :class:`InstanceNeeds`
(``--instance-resources cpus=4,memory=16g,disk=40g`` or the engines file's ``instance``;
default 1 CPU, 1 GiB, 2 GiB of disk). The engine takes ``min(capacity, NCPU / cpus,
(free memory - reserve) / memory, (free disk - 1 GiB) / disk)`` instances: the configured
capacity is a maximum. The reserve is 5 % of the engine's memory (at least 256 MiB).

**Memory pressure** (:func:`memory_pressure`, checked before each placement through
:func:`engine_pressure`): an engine whose free memory cannot hold one more instance plus
the reserve, or whose tasks all stall on memory 10 % of the time or more (PSI ``full
avg10``), gets no new instance until a later reading shows room. Readings are shared by
every process of the run through a small state file per engine and refreshed at most every
:data:`REFRESH_S` seconds; each change (``memory_pressure``, ``recovered``) is appended to
the run's placement events, which the manifest's engine records list at session end.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import io
import json
import os
import re
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from harness.core.fsutil import atomic_write_json

if TYPE_CHECKING:
    import docker

MiB = 1 << 20
GiB = 1 << 30
MEMORY_RESERVE_FRACTION = 0.05
MEMORY_RESERVE_MIN = 256 * MiB
DISK_RESERVE = 1 * GiB
PSI_FULL_LIMIT = 10.0  # % of the last 10 s during which every task stalled on memory
REFRESH_S = 10.0  # a shared reading is reused this long
PROBE_TIMEOUT_S = 60
PROBE_IMAGE = "harness-engine-probe"
EVENTS = "events.jsonl"

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": MiB, "g": GiB, "t": 1 << 40}


def parse_size(value: str | int | float) -> int:
    """Bytes from ``16g``, ``512m``, ``1.5GiB``, ``2048`` (powers of 1024, as Docker's
    ``--memory``)."""
    if isinstance(value, (int, float)):
        return int(value)
    found = _SIZE.match(value)
    if found is None:
        raise ValueError(f"not a size: {value!r} (e.g. 16g, 512m)")
    return int(float(found.group(1)) * _UNITS[found.group(2).lower()])


def gib(n: int | None) -> str:
    return "?" if n is None else f"{n / GiB:.1f} GiB"


class InstanceNeeds(BaseModel):
    """What one instance takes on an engine (its sandbox and sidecars)."""

    model_config = ConfigDict(extra="forbid")

    cpus: float = Field(default=1.0, ge=0)
    memory: int = Field(default=1 * GiB, ge=0)
    disk: int = Field(default=2 * GiB, ge=0)

    @field_validator("memory", "disk", mode="before")
    @classmethod
    def _size(cls, value: Any) -> int:
        return parse_size(value)


def parse_needs(text: str) -> InstanceNeeds:
    """``cpus=4,memory=16g,disk=40g`` (any subset; the rest keep their defaults)."""
    fields: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in InstanceNeeds.model_fields:
            raise ValueError(f"expected cpus=N, memory=SIZE, disk=SIZE, not {part!r}")
        fields[key.strip()] = value.strip()
    try:
        return InstanceNeeds.model_validate(fields)
    except ValueError as exc:
        raise ValueError(str(exc).splitlines()[-1].strip()) from exc


class EngineResources(BaseModel):
    """One reading of an engine (bytes; None: not known)."""

    model_config = ConfigDict(extra="forbid")

    ncpu: int | None = None
    mem_total: int | None = None
    mem_available: int | None = None
    disk_free: int | None = None
    disk_total: int | None = None
    psi_full_avg10: float | None = None
    at_unix: float = 0.0
    probe_error: str | None = None


class PlacementEvent(BaseModel):
    """A change of an engine's state seen while placing instances (``memory_pressure``:
    no new instance there until ``recovered``)."""

    model_config = ConfigDict(extra="forbid")

    engine: int
    at_unix: float
    event: str
    detail: str = ""
    mem_available: int | None = None
    pid: int | None = None


class EngineState(BaseModel):
    """The last shared reading of one engine (``state-<index>.json``)."""

    model_config = ConfigDict(extra="forbid")

    at_unix: float
    resources: EngineResources
    pressure: str | None = None


# ---------------------------------------------------------------------------- reading


@functools.cache
def _probe_binary() -> tuple[str, bytes]:
    """The probe's image reference and program, built (or read from the tools' cache) and
    hashed once per process: every reading of every engine needs the reference."""
    from harness.sandbox.static_tools import build_static

    binary = build_static("engine_probe.c")
    return f"{PROBE_IMAGE}:{hashlib.sha256(binary).hexdigest()[:16]}", binary


def _probe_image(api: docker.APIClient) -> str:
    """The probe's image on this engine (imported the first time: a few hundred KB)."""
    from docker.errors import ImageNotFound

    ref, binary = _probe_binary()
    try:
        api.inspect_image(ref)
        return ref
    except ImageNotFound:
        pass
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("probe")
        info.size, info.mode = len(binary), 0o755
        tar.addfile(info, io.BytesIO(binary))
    repo, _, tag = ref.partition(":")
    api.import_image_from_data(buf.getvalue(), repository=repo, tag=tag)
    return ref


def _parse_probe(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key in ("mem_total", "mem_available", "disk_free", "disk_total"):
            out[key] = int(value)
        elif key == "psi_full_avg10":
            out[key] = float(value)
    return out


def _run_probe(api: docker.APIClient, labels: dict[str, str], name: str) -> dict[str, Any]:
    image = _probe_image(api)
    host_config = api.create_host_config(
        network_mode="none",
        read_only=True,
        mem_limit="32m",
        pids_limit=8,
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
    )
    container = api.create_container(
        image,
        command=["/probe"],
        user="65534:65534",
        labels=labels,
        name=name,
        host_config=host_config,
        network_disabled=True,
    )
    cid = container["Id"]
    try:
        api.start(cid)
        status = api.wait(cid, timeout=PROBE_TIMEOUT_S)
        if status.get("StatusCode") != 0:
            raise RuntimeError(f"the probe exited {status.get('StatusCode')}")
        out = api.logs(cid, stdout=True, stderr=False)
        return _parse_probe(out.decode("utf-8", "replace"))
    finally:
        api.remove_container(cid, force=True)


def read_resources(
    client: docker.DockerClient, url: str, labels: dict[str, str], name: str
) -> EngineResources:
    """One reading of the engine behind ``client`` (``url`` names it, for tests' doubles);
    the probe container gets ``labels`` (the run's, with a TTL) and ``name``.

    ``/info`` errors propagate (the engine does not answer); a failed probe is recorded in
    ``probe_error`` and leaves its fields unknown.
    """
    info = client.api.info()
    found = EngineResources(
        ncpu=int(info.get("NCPU") or 0) or None,
        mem_total=int(info.get("MemTotal") or 0) or None,
        at_unix=round(time.time(), 3),
    )
    try:
        probed = _run_probe(client.api, labels, name)
    except Exception as exc:  # an engine that cannot run it is sized by /info alone
        return found.model_copy(update={"probe_error": f"{type(exc).__name__}: {exc}"[:300]})
    return found.model_copy(update=probed)


# ---------------------------------------------------------------------------- deciding


def memory_reserve(res: EngineResources) -> int:
    total = res.mem_total or 0
    return max(MEMORY_RESERVE_MIN, int(total * MEMORY_RESERVE_FRACTION))


def capacity_limits(res: EngineResources, needs: InstanceNeeds) -> dict[str, int]:
    """How many instances each known resource allows."""
    out: dict[str, int] = {}
    if needs.cpus > 0 and res.ncpu:
        out["cpus"] = int(res.ncpu / needs.cpus + 1e-9)
    free_memory = res.mem_available if res.mem_available is not None else res.mem_total
    if needs.memory > 0 and free_memory is not None:
        out["memory"] = max(0, (free_memory - memory_reserve(res)) // needs.memory)
    if needs.disk > 0 and res.disk_free is not None:
        out["disk"] = max(0, (res.disk_free - DISK_RESERVE) // needs.disk)
    return out


def admitted_capacity(
    max_capacity: int, res: EngineResources, needs: InstanceNeeds
) -> tuple[int, dict[str, int] | None]:
    """(instances admitted, the resources that bound it below ``max_capacity`` or None)."""
    limits = capacity_limits(res, needs)
    binding = {k: v for k, v in limits.items() if v < max_capacity}
    return max(0, min([max_capacity, *limits.values()])), binding or None


def memory_pressure(res: EngineResources, needs: InstanceNeeds) -> str | None:
    """Why the engine takes no new instance now, or None."""
    if res.psi_full_avg10 is not None and res.psi_full_avg10 >= PSI_FULL_LIMIT:
        return (
            f"every task stalled on memory {res.psi_full_avg10:.0f}% of the last 10 s "
            f"(PSI full avg10 >= {PSI_FULL_LIMIT:.0f})"
        )
    if res.mem_available is None:
        return None
    reserve = memory_reserve(res)
    if res.mem_available < needs.memory + reserve:
        return (
            f"{gib(res.mem_available)} free: one more instance needs {gib(needs.memory)} "
            f"plus {gib(reserve)} kept free"
        )
    return None


def describe_limits(res: EngineResources, needs: InstanceNeeds, binding: dict[str, int]) -> str:
    have = {
        "cpus": f"{res.ncpu} CPU(s) for {needs.cpus:g} each",
        "memory": f"{gib(res.mem_available or res.mem_total)} free for {gib(needs.memory)} "
        f"each (+{gib(memory_reserve(res))} kept free)",
        "disk": f"{gib(res.disk_free)} of disk free for {gib(needs.disk)} each "
        f"(+{gib(DISK_RESERVE)} kept free)",
    }
    return "; ".join(f"{k}: {n} ({have[k]})" for k, n in sorted(binding.items()))


# ---------------------------------------------------------------------------- shared state


def state_path(folder: Path, index: int) -> Path:
    return folder / f"state-{index}.json"


def write_state(
    folder: Path, index: int, resources: EngineResources, pressure: str | None
) -> EngineState:
    folder.mkdir(parents=True, exist_ok=True)
    state = EngineState(at_unix=time.time(), resources=resources, pressure=pressure)
    atomic_write_json(state_path(folder, index), state)
    return state


def append_event(folder: Path, event: PlacementEvent) -> None:
    """One line, one ``write`` with ``O_APPEND`` (lines of several processes never mix)."""
    folder.mkdir(parents=True, exist_ok=True)
    line = (event.model_dump_json() + "\n").encode()
    fd = os.open(folder / EVENTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_events(folder: Path) -> list[PlacementEvent]:
    path = folder / EVENTS
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(PlacementEvent.model_validate(json.loads(line)))
        except ValueError:
            continue  # a torn last line
    return out


_seen: dict[tuple[str, int], EngineState] = {}  # (folder, engine) -> the last reading seen


def engine_pressure(
    folder: Path,
    index: int,
    needs: InstanceNeeds,
    measure: Callable[[], EngineResources],
    refresh_s: float | None = None,
) -> str | None:
    """The engine's memory pressure now (None: room for one more instance), from the shared
    reading when it is fresh, else from a new one (one process measures, the others wait
    for it). A reading that fails keeps the last verdict for another ``refresh_s`` (an
    engine that stopped answering is the ping's business). A reading this process saw and that is still fresh is used
    without touching the files: a placement polls every engine with a free slot."""
    refresh = REFRESH_S if refresh_s is None else refresh_s
    key = (str(folder), index)
    seen = _seen.get(key)
    if seen is not None and time.time() - seen.at_unix < refresh:
        return seen.pressure  # no newer shared reading can exist before this one is stale
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / f"state-{index}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        previous: EngineState | None = None
        path = state_path(folder, index)
        if path.exists():
            try:
                previous = EngineState.model_validate_json(path.read_text())
            except ValueError:
                previous = None
        if previous is not None and time.time() - previous.at_unix < refresh:
            _seen[key] = previous
            return previous.pressure
        try:
            res = measure()
        except Exception:  # retried when a reading would be: not on every placement's poll
            if previous is None:
                return None
            _seen[key] = write_state(folder, index, previous.resources, previous.pressure)
            return previous.pressure
        pressure = memory_pressure(res, needs)
        before = previous.pressure if previous is not None else None
        if (pressure is None) != (before is None):
            append_event(
                folder,
                PlacementEvent(
                    engine=index,
                    at_unix=round(time.time(), 3),
                    event="memory_pressure" if pressure else "recovered",
                    detail=pressure or "room for one more instance",
                    mem_available=res.mem_available,
                    pid=os.getpid(),
                ),
            )
        _seen[key] = write_state(folder, index, res, pressure)
        return pressure
    finally:
        os.close(fd)


__all__ = [
    "EngineResources",
    "EngineState",
    "InstanceNeeds",
    "PlacementEvent",
    "admitted_capacity",
    "append_event",
    "capacity_limits",
    "engine_pressure",
    "memory_pressure",
    "parse_needs",
    "parse_size",
    "read_events",
    "read_resources",
    "write_state",
]
