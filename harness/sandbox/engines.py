"""The Docker engines of a run: which ones, how many instances each, and a client for each.

A run uses the local engine (``DOCKER_HOST`` or the default socket) unless given
``--docker-host URL`` (repeatable; capacity = the worker count, no labels) or
``--engines FILE`` (TOML or JSON: ``{"engines": [{"url": ..., "capacity": N, "labels":
{"arch": "arm64"}}]}``). URLs are Docker's own: ``unix://``, ``tcp://`` (TLS from the usual
``DOCKER_TLS_VERIFY``/``DOCKER_CERT_PATH`` environment) or ``ssh://``.

At admission the controller probes every engine (:func:`probe`) and writes the list to
``<run_root>/.harness/engines.json``; workers read it from there (the frozen engine list of
the run, like ``plan.json``). No pytest import here.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.core.fsutil import atomic_write_json
from harness.core.layout import state_dir

if TYPE_CHECKING:  # docker-py loads when an engine is reached, not when pytest collects
    import docker

LOCAL = "local"  # the URL of "whatever DOCKER_HOST / the default socket is"
PING_TIMEOUT_S = 10


class EngineError(ValueError):
    """A bad ``--engines`` file or ``--docker-host`` value (a usage error, one line)."""


class EngineSpec(BaseModel):
    """One engine as the user gave it."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1)
    capacity: int = Field(default=0, ge=0)  # 0: the worker count
    labels: dict[str, str] = Field(default_factory=dict)


class EngineRecord(EngineSpec):
    """One engine of a run as the manifest records it (after the admission probe)."""

    index: int
    server_version: str | None = None
    reachable: bool = True
    error: str | None = None


class EnginesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    engines: list[EngineSpec] = Field(min_length=1)


def load_engines_file(path: Path | str) -> list[EngineSpec]:
    """Parse a TOML (``*.toml``) or JSON engines file; :class:`EngineError` names the problem."""
    p = Path(path)
    try:
        text = p.read_text()
        data = tomllib.loads(text) if p.suffix == ".toml" else json.loads(text)
        return EnginesFile.model_validate(data).engines
    except (OSError, ValueError, ValidationError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise EngineError(f"--engines {path}: {first}") from exc


def engine_specs(hosts: list[str], engines_file: str | None, workers: int) -> list[EngineSpec]:
    """The run's engines from the options; [] means the local engine only (no placement)."""
    if hosts and engines_file:
        raise EngineError("give either --docker-host or --engines, not both")
    specs = load_engines_file(engines_file) if engines_file else [EngineSpec(url=h) for h in hosts]
    urls = [s.url for s in specs]
    dup = sorted({u for u in urls if urls.count(u) > 1})
    if dup:
        raise EngineError(f"engine listed twice: {', '.join(dup)}")
    default = max(1, workers)
    return [s.model_copy(update={"capacity": s.capacity or default}) for s in specs]


def client_for(url: str, timeout: int = 120) -> docker.DockerClient:
    """A client of one engine (``local``: from the environment). Not pinged."""
    import docker

    if url == LOCAL:
        return docker.from_env(timeout=timeout)
    env = {k: v for k, v in os.environ.items() if k.startswith("DOCKER_")}
    env["DOCKER_HOST"] = url
    return docker.from_env(timeout=timeout, environment=env, use_ssh_client=url.startswith("ssh"))


def probe(spec: EngineSpec, index: int) -> EngineRecord:
    """Ping one engine and read its server version; an unreachable engine is recorded so."""
    from docker.errors import DockerException

    try:
        client = client_for(spec.url, timeout=PING_TIMEOUT_S)
        try:
            version = str(client.version().get("Version", "")) or None
        finally:
            client.close()
    except (DockerException, OSError) as exc:
        return EngineRecord(**spec.model_dump(), index=index, reachable=False,
                            error=f"{type(exc).__name__}: {exc}"[:300])
    return EngineRecord(**spec.model_dump(), index=index, server_version=version)


def alive(url: str) -> bool:
    """True if the engine answers a ping within :data:`PING_TIMEOUT_S`."""
    from docker.errors import DockerException

    try:
        client = client_for(url, timeout=PING_TIMEOUT_S)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (DockerException, OSError):
        return False


def engines_path(run_root: Path | str) -> Path:
    return state_dir(run_root) / "engines.json"


def write_engines(run_root: Path | str, records: list[EngineRecord]) -> None:
    atomic_write_json(engines_path(run_root), [r.model_dump(mode="json") for r in records])


def read_engines(run_root: Path | str) -> list[EngineRecord]:
    """The run's engines ([] when the run uses only the local engine)."""
    path = engines_path(run_root)
    if not path.exists():
        return []
    return [EngineRecord.model_validate(r) for r in json.loads(path.read_text())]


__all__ = ["LOCAL", "EngineError", "EngineRecord", "EngineSpec", "alive", "client_for",
           "engine_specs", "load_engines_file", "probe", "read_engines", "write_engines"]
