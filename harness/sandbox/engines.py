"""The Docker engines of a run: which ones, how many instances each, and a client for each.

A run uses the local engine (``DOCKER_HOST`` or the default socket) unless given
``--docker-host URL`` (repeatable; capacity at most the worker count, no labels) or
``--engines FILE`` (TOML or JSON: ``{"engines": [{"url": ..., "capacity": N, "labels":
{"arch": "arm64"}, "cert_path": DIR}], "instance": {"cpus": 4, "memory": "16g", "disk":
"40g"}}``). URLs are Docker's own:

* ``unix://`` and ``tcp://`` as Docker reads them; a ``tcp://`` engine with ``cert_path`` (a
  folder of Docker's ``ca.pem``, ``cert.pem``, ``key.pem``; relative to the file) is reached
  over TLS with the server verified and the client certificate sent (``--tlsverify``), each
  engine with its own certificates; without it, TLS comes from the usual
  ``DOCKER_TLS_VERIFY``/``DOCKER_CERT_PATH`` environment as before;
* ``ssh://[user@]host[:port][/remote.sock]`` through one ssh tunnel per engine
  (:mod:`harness.sandbox.ssh_tunnel`): the run's clients, and the ``docker`` and official
  tools' subprocesses, talk to a local socket forwarded to the remote engine's socket.

``capacity`` is a maximum: at admission each engine's resources (:mod:`.engine_capacity`:
CPUs, free memory and disk, read from the engine) set how many instances of the run's size
(``instance``, or ``--instance-resources``) it takes, at most ``capacity`` (0: the worker
count).

At admission the controller probes every engine (:func:`probe`) and writes the list to
``<run_root>/.harness/engines.json``; workers read it from there (the frozen engine list of
the run, like ``plan.json``). No pytest import here.
"""

from __future__ import annotations

import json
import os
import re
import socket
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.core.fsutil import atomic_write_json
from harness.core.layout import state_dir
from harness.sandbox.engine_capacity import EngineResources, InstanceNeeds, PlacementEvent

if TYPE_CHECKING:  # docker-py loads when an engine is reached, not when pytest collects
    import docker

LOCAL = "local"  # the URL of "whatever DOCKER_HOST / the default socket is"
PING_TIMEOUT_S = 10
CERT_FILES = ("ca.pem", "cert.pem", "key.pem")


class EngineError(ValueError):
    """A bad ``--engines`` file or ``--docker-host`` value (a usage error, one line)."""


class EngineSpec(BaseModel):
    """One engine as the user gave it."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1)
    capacity: int = Field(default=0, ge=0)  # the most instances at once; 0: the worker count
    labels: dict[str, str] = Field(default_factory=dict)
    cert_path: str | None = None  # tcp:// over TLS (verified both ways) with these certs

    @model_validator(mode="after")
    def _tls_only_on_tcp(self) -> EngineSpec:
        if self.cert_path is not None and not self.url.startswith("tcp://"):
            raise ValueError(f"cert_path is for tcp:// engines, not {self.url}")
        return self


class EngineRecord(EngineSpec):
    """One engine of a run as the manifest records it (after the admission probe).

    ``capacity`` is what the run admitted (slots); ``max_capacity`` what the options allowed.
    """

    index: int
    server_version: str | None = None
    reachable: bool = True
    error: str | None = None
    via: str | None = None  # the local endpoint of its ssh tunnel (ssh:// engines)
    max_capacity: int | None = None
    limited_by: dict[str, int] | None = None  # resource -> instances it allows, when binding
    resources: EngineResources | None = None
    instance: InstanceNeeds | None = None  # the size each instance is admitted at
    lease: dict[str, Any] | None = None  # this run's lease on the engine (harness.sandbox.lease)
    events: list[PlacementEvent] | None = None  # at session end


class EnginesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    engines: list[EngineSpec] = Field(min_length=1)
    instance: InstanceNeeds | None = None


def _read(path: Path | str) -> EnginesFile:
    p = Path(path)
    try:
        text = p.read_text()
        data = tomllib.loads(text) if p.suffix == ".toml" else json.loads(text)
        parsed = EnginesFile.model_validate(data)
    except (OSError, ValueError, ValidationError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if isinstance(exc, ValidationError) and exc.errors():
            err = exc.errors()[0]
            first = f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}"
        raise EngineError(f"--engines {path}: {first}") from exc
    for spec in parsed.engines:  # certificates relative to the file, checked now
        if spec.cert_path is not None:
            folder = (p.parent / Path(spec.cert_path).expanduser()).resolve()
            missing = [f for f in CERT_FILES if not (folder / f).is_file()]
            if missing:
                raise EngineError(
                    f"--engines {path}: {spec.url}: cert_path {folder} lacks {', '.join(missing)}"
                )
            spec.cert_path = str(folder)
    return parsed


def load_engines_file(path: Path | str) -> list[EngineSpec]:
    """Parse a TOML (``*.toml``) or JSON engines file; :class:`EngineError` names the problem."""
    return _read(path).engines


def instance_needs(engines_file: str | None, option: str | None) -> InstanceNeeds:
    """The size of one instance: ``--instance-resources``, else the file's ``instance``,
    else the defaults of :class:`InstanceNeeds`."""
    from harness.sandbox.engine_capacity import parse_needs

    if option:
        try:
            return parse_needs(option)
        except ValueError as exc:
            raise EngineError(f"--instance-resources {option}: {exc}") from exc
    if engines_file:
        found = _read(engines_file).instance
        if found is not None:
            return found
    return InstanceNeeds()


def engine_specs(hosts: list[str], engines_file: str | None, workers: int) -> list[EngineSpec]:
    """The run's engines from the options; [] means the local engine only (no placement)."""
    if hosts and engines_file:
        raise EngineError("give either --docker-host or --engines, not both")
    specs = load_engines_file(engines_file) if engines_file else [EngineSpec(url=h) for h in hosts]
    urls = [s.url for s in specs]
    dup = sorted({u for u in urls if urls.count(u) > 1})
    if dup:
        raise EngineError(f"engine listed twice: {', '.join(dup)}")
    for spec in specs:
        if spec.url.startswith("ssh://"):
            from harness.sandbox.ssh_tunnel import parse_ssh_url

            try:
                parse_ssh_url(spec.url)
            except ValueError as exc:
                raise EngineError(str(exc)) from exc
    default = max(1, workers)
    return [s.model_copy(update={"capacity": s.capacity or default}) for s in specs]


# ---------------------------------------------------------------------------- connecting

_known: dict[str, EngineSpec] = {}  # url -> the run's spec (its certificates, its tunnel)


def remember(specs: list[EngineRecord]) -> None:
    """Let :func:`client_for` given a bare URL use these engines' certificates and tunnels."""
    for spec in specs:
        _known[spec.url] = spec


def _socket_answers(endpoint: str) -> bool:
    path = endpoint.removeprefix("unix://")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2)
        try:
            sock.connect(path)
        except OSError:
            return False
    return True


def engine_environment(engine: EngineSpec | str) -> dict[str, str]:
    """``DOCKER_*`` variables that reach ``engine``: put over this process's environment in
    the ``environment``/``env`` handed to a client or subprocess (the ``docker`` CLI, the
    official tools) of an instance placed on it (:func:`harness.sandbox.placement.
    instance_environment`; ``os.environ`` is never changed). Empty for :data:`LOCAL`."""
    spec = _known.get(engine, EngineSpec(url=engine)) if isinstance(engine, str) else engine
    if spec.url == LOCAL:
        return {}
    via = spec.via if isinstance(spec, EngineRecord) else None
    env = {"DOCKER_HOST": via if via else spec.url}
    if spec.cert_path is not None:
        env["DOCKER_TLS_VERIFY"] = "1"
        env["DOCKER_CERT_PATH"] = spec.cert_path
    return env


def client_for(engine: EngineSpec | str, timeout: int = 120) -> docker.DockerClient:
    """A client of one engine (``local``: from the environment). Not pinged.

    A bare URL of an engine this process knows (:func:`remember`, :func:`read_engines`)
    uses its certificates and tunnel; an ``ssh://`` engine without a live tunnel of the run
    gets one of its own, closed with the client.
    """
    import docker

    from harness.sandbox.client import EngineClient

    spec = _known.get(engine, EngineSpec(url=engine)) if isinstance(engine, str) else engine
    if spec.url == LOCAL:
        return EngineClient.from_env(timeout=timeout)
    via = spec.via if isinstance(spec, EngineRecord) else None
    if spec.url.startswith("ssh://"):
        if via and _socket_answers(via):
            return docker.DockerClient(base_url=via, timeout=timeout)
        from harness.sandbox.ssh_tunnel import tunnel_client

        return tunnel_client(spec.url, timeout=timeout)
    env = {k: v for k, v in os.environ.items() if k.startswith("DOCKER_")}
    env.update(engine_environment(spec))
    return EngineClient.from_env(timeout=timeout, environment=env)


def probe(spec: EngineSpec, index: int, via: str | None = None) -> EngineRecord:
    """Ping one engine and read its server version; an unreachable engine is recorded so.

    ``via``: the local endpoint of the run's tunnel to an ``ssh://`` engine.
    """
    from docker.errors import DockerException

    given = spec.model_dump(include=set(EngineSpec.model_fields))
    record = EngineRecord(**given, index=index, via=via)
    try:
        client = client_for(record, timeout=PING_TIMEOUT_S)
        try:
            version = str(client.version().get("Version", "")) or None
        finally:
            client.close()
    except (DockerException, OSError, RuntimeError) as exc:
        return record.model_copy(
            update={"reachable": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
        )
    return record.model_copy(update={"server_version": version})


_OS_ERROR = re.compile(r"\w+Error\(-?\d+, '([^']+)'\)")  # FileNotFoundError(2, '...')
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\"()\[\]]+)")  # [Errno 111] Connection refused
_WRAPPERS = ("DockerException: ", "Error while fetching server API version: ")


def brief_error(error: str | None) -> str:
    """An engine's error in a few words, on one line: the system's reason when docker-py
    wrapped one (``No such file or directory``, ``Connection refused``, ``Permission
    denied``), ``timed out``, else the message without docker-py's wrappers (at most 160
    characters)."""
    text = " ".join((error or "no answer").split())
    for pattern in (_OS_ERROR, _ERRNO):
        found = pattern.findall(text)
        if found:
            return str(found[-1]).strip()
    if "timed out" in text.lower():
        return "timed out"
    for wrapper in _WRAPPERS:
        text = text.removeprefix(wrapper)
    return text if len(text) <= 160 else text[:157] + "..."


def alive(engine: EngineSpec | str) -> bool:
    """True if the engine answers a ping within :data:`PING_TIMEOUT_S`."""
    from docker.errors import DockerException

    try:
        client = client_for(engine, timeout=PING_TIMEOUT_S)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (DockerException, OSError, RuntimeError):
        return False


def engines_path(run_root: Path | str) -> Path:
    return state_dir(run_root) / "engines.json"


def write_engines(run_root: Path | str, records: list[EngineRecord]) -> None:
    atomic_write_json(engines_path(run_root), [r.model_dump(mode="json") for r in records])
    remember(records)


def read_engines(run_root: Path | str) -> list[EngineRecord]:
    """The run's engines ([] when the run uses only the local engine)."""
    path = engines_path(run_root)
    if not path.exists():
        return []
    records = [EngineRecord.model_validate(r) for r in json.loads(path.read_text())]
    remember(records)
    return records


__all__ = [
    "LOCAL",
    "EngineError",
    "EngineRecord",
    "EngineSpec",
    "PlacementEvent",
    "alive",
    "brief_error",
    "client_for",
    "engine_environment",
    "engine_specs",
    "instance_needs",
    "load_engines_file",
    "probe",
    "read_engines",
    "remember",
    "write_engines",
]
