"""Which images a Cowork run uses: ``--cowork-image`` and ``--cowork-pg-image``, resolved once.

* ``--cowork-image REF``: the agent and eval containers run ``REF`` (e.g. the checkout's own
  ``cowork-pack:<commit>`` from ``harness cowork build-image``) instead of the harness's
  Debian runtime image. A local image is used as is; a missing one is pulled only when the
  reference names a registry (``host[:port]/repo:tag``, ``localhost/...``), with the run's
  pull settings; otherwise admission refuses it, naming ``harness cowork build-image``.
* ``--cowork-pg-image REF``: the PostgreSQL sidecar's image, resolved like any task image
  (:func:`harness.sandbox.images.pull.resolve_image`: local, else pulled, per ``--pull``).
  Either the official ``postgres`` image's contract (``docker-entrypoint.sh`` and ``PGDATA``,
  e.g. ``postgres:15`` itself: its entrypoint loads the dump) or the harness's pg15 layout
  (a Debian ``postgresql-15`` cluster ``15 main``, started with its ``pg_ctl``, superuser
  role ``eigent``/``camel``, database ``cowork_gym``); :func:`benchmarks.cowork_bench.sidecar.pg_layout`
  tells which.

* ``--cowork-build-image``: the agent and eval containers run the checkout's own image with the
  harness's layer (:func:`benchmarks.cowork_bench.build_image.ensure_checkout_image`: the
  checkout's ``Dockerfile`` built untouched, reused for a clean commit already built, then
  the derived image), built by the controller when the run resolves its images (a dry run
  too); a build failure refuses the run (exit 2, the failing step and the log named). The
  derived image is recorded as ``--cowork-image`` would be (its tag and ID); an xdist worker
  never builds, it runs the ID the controller admitted into the manifest.

The resolved image IDs enter the run's result configuration (a resume with another image is
refused) and ``extra.cowork.images`` of the manifest; each row's ``details.cowork_bench``
(``runtime_image``, ``pg_image``) names the IDs its containers ran.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict

from harness.api import InfraError, RefusalError

Role = Literal["runtime", "pg"]
FLAGS: dict[Role, str] = {"runtime": "--cowork-image", "pg": "--cowork-pg-image"}
BUILD_FLAG = "--cowork-build-image"


class ChosenImage(BaseModel):
    """``extra.cowork.images.<role>``: a given reference and the image ID it resolved to."""

    model_config = ConfigDict(extra="forbid")

    ref: str
    id: str
    pulled: bool = False
    repo_digest: str | None = None


@dataclasses.dataclass
class RunImages:
    """The images given on the command line, resolved (``error``: admission refuses)."""

    chosen: dict[Role, ChosenImage] = dataclasses.field(default_factory=dict)
    error: RefusalError | None = None
    admitted_only: set[Role] = dataclasses.field(default_factory=set)  # built by the controller

    def image_id(self, role: Role, run_root: Path | None = None) -> str | None:
        """The ID to run for ``role`` (None: the harness's own image): the one admitted into
        ``run_root``'s manifest when it records one (what the result config names), else
        this process's resolution."""
        admitted = admitted_ids(run_root) if run_root is not None else {}
        if role in admitted:
            return admitted[role]
        if self.error is not None:  # admission refused: an instance never gets here
            raise InfraError(str(self.error), "image_missing")
        if role in self.admitted_only:
            raise InfraError(f"{BUILD_FLAG}: the run manifest names no {role} image (the "
                             "controller builds and admits it)", "image_missing")  # fmt: skip
        chosen = self.chosen.get(role)
        return chosen.id if chosen else None

    def record(self) -> dict[str, Any]:
        return {role: c.model_dump(mode="json") for role, c in self.chosen.items()}


def admitted_ids(run_root: Path) -> dict[str, str]:
    """``extra.cowork.images`` of the run's manifest: role -> image ID (empty if none)."""
    from harness.api import read_manifest

    try:
        images = (read_manifest(run_root).extra.section("cowork") or {}).get("images") or {}
        return {str(role): ChosenImage.model_validate(c).id for role, c in images.items()}
    except Exception:  # the manifest is the runner's; no record means this process decides
        return {}


def has_registry(ref: str) -> bool:
    """``host.tld/...``, ``host:port/...`` or ``localhost/...``: a pull can find it."""
    first, sep, _ = ref.partition("/")
    return bool(sep) and ("." in first or ":" in first or first == "localhost")


def _pull_settings(config: pytest.Config) -> Any:
    """The run's pull settings without its per-run lock folder (one pull, at admission)."""
    from harness.api import PullSettings, pull_settings

    if config.getoption("pull", None) is None:  # the pull plugin is not loaded
        return PullSettings()
    return dataclasses.replace(pull_settings(config, Path("."), ""), lock_dir=None, pin=None)


def _missing(role: Role, ref: str, why: str) -> RefusalError:
    fix = (
        "build it with `harness cowork build-image --cowork-root PATH` (or pass a "
        "registry reference it can be pulled from)"
        if role == "runtime"
        else "pull or load it first, or leave the option out (the harness builds its own)"
    )
    return RefusalError(f"{FLAGS[role]} {ref}: {why}; {fix}", stage="options",
                        reason="image_missing")  # fmt: skip


def resolve_one(client: Any, role: Role, ref: str, config: pytest.Config) -> ChosenImage:
    """Local image, else (the sidecar always, the runtime with a registry) a pull."""
    from docker.errors import APIError, ImageNotFound

    from harness.api import resolve_image

    try:
        local = client.api.inspect_image(ref)
    except ImageNotFound:
        local = None
    except APIError as exc:
        raise _missing(role, ref, f"the engine cannot inspect it ({exc})") from exc
    if local is not None:
        return ChosenImage(ref=ref, id=str(local["Id"]))
    if role == "runtime" and not has_registry(ref):
        raise _missing(role, ref, "no such image on the engine")
    try:
        rec = resolve_image(client, ref, _pull_settings(config))
    except InfraError as exc:
        line = " ".join(str(exc).split())[:300]
        raise _missing(role, ref, f"not on the engine and not pullable ({line})") from exc
    return ChosenImage(ref=ref, id=rec.id, pulled=rec.pulled, repo_digest=rec.repo_digest)


def build_requested(config: pytest.Config) -> bool:
    return bool(config.getoption("cowork_build_image", False))


def built_runtime(config: pytest.Config) -> ChosenImage:
    """``--cowork-build-image``: the checkout's image with the harness's layer (built if missing)."""
    from benchmarks.cowork_bench.build_image import BuildFailed, ensure_checkout_image

    root = Path(str(config.getoption("cowork_root"))).expanduser().resolve()
    try:
        built = ensure_checkout_image(root)
    except BuildFailed as exc:
        tail = " | ".join(line.strip() for line in exc.tail[-3:] if line.strip())
        raise RefusalError(f"{BUILD_FLAG}: {exc}{'; log tail: ' + tail if tail else ''}",
                           stage="options", reason="image_build_failed") from exc  # fmt: skip
    except (ValueError, OSError) as exc:  # not a git checkout, no Dockerfile
        raise RefusalError(f"{BUILD_FLAG}: cannot build {root}/Dockerfile: {exc}",
                           stage="options", reason="image_build_failed") from exc  # fmt: skip
    assert built.derived is not None
    return ChosenImage(ref=built.derived.tag, id=built.derived.image_id)


def resolve_images(config: pytest.Config, refs: dict[Role, str | None]) -> RunImages:
    """Resolve every given reference and build ``--cowork-build-image``'s (neither: no Docker call
    at all)."""
    given = {role: ref for role, ref in refs.items() if ref}
    out = RunImages()
    build = build_requested(config)
    if build and hasattr(config, "workerinput"):  # the controller built it and admitted it
        out.admitted_only.add("runtime")
        build = False
    if not given and not build:
        return out
    from harness.api import SandboxError, get_client

    try:
        client = get_client()
        for role, ref in given.items():
            out.chosen[role] = resolve_one(client, role, ref, config)
        if build:
            out.chosen["runtime"] = built_runtime(config)
    except SandboxError as exc:
        out.error = RefusalError(f"cowork images: {exc}", stage="options", reason="image_missing")
    except RefusalError as exc:
        out.error = exc
    return out


def admitted_run_images(images: RunImages) -> dict[str, str]:
    """role -> the image ID a run admits: the given images, else the harness's own (built
    when missing, as the first instance would)."""
    from benchmarks.cowork_bench.images import ImageName, ensure_image

    out = {str(role): chosen.id for role, chosen in images.chosen.items()}
    defaults: list[tuple[Role, ImageName]] = [("runtime", "runtime"), ("pg", "pg15")]
    for role, name in defaults:
        if role not in out:
            out[role] = ensure_image(name).image_id
    return out
