"""pytest plugin: image pull options, digest pins, and the image-change check on resume.

Options (registered by :mod:`harness.runner.options`; documented in
docs/guides/engines-and-images.md):

``--pull missing|always|never``  when to pull an instance's image (default ``missing``)
``--pull-jobs N``                 concurrent pulls shared by all workers of the run (2)
``--pull-retries N``              retries of a failed pull, with back-off (3)
``--pull-min-free-gb G``          free disk to keep on the engine's data root (5)
``--image-mirror HOST[:PORT]``    pull ``HOST:PORT/<repository>:<tag>`` instead
``--image-digest-file FILE``      JSON ``{instance_id: "sha256:..."}``: run exactly these
``--image-disk-ceiling-gb G``     the most disk (GiB) the run's pulled images hold at once on
                                  an engine; each is removed after its instance's eval
                                  (:mod:`harness.sandbox.images.ceiling`)
``--allow-image-change``          let a resume run changed images (recorded)

Benchmarks call :func:`pull_settings` for an instance and :func:`harness.sandbox.images.pull.
resolve_image` with it, and put the :class:`~harness.sandbox.images.pull.ImageRecord` in the
row's ``details.engine.image``; at session end every row's image is copied into the
manifest's ``images``.
:meth:`harness.runner.trial.Trial.pull_image` does all of it, with the ceiling's hold and
release.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness.core.errors import RefusalError
from harness.core.layout import state_dir
from harness.sandbox.images.pull_settings import PullSettings, mirror_ref

if TYPE_CHECKING:
    from harness.core.models import TaskRow
    from harness.runner.instance import RunContext
    from harness.sandbox.images.ceiling import ImageCeiling, Progress

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
PINS_KEY = pytest.StashKey[dict[str, str]]()
GIB = 1 << 30
# A pull waiting for room under the ceiling gives up at this share of the pull phase's
# deadline, with its own reason (image_ceiling_full) before the phase's timer ends it.
CEILING_WAIT_SHARE = 0.9


def load_pins(path: str | None) -> dict[str, str]:
    """The digest file, validated; a bad file is a one-line refusal naming it."""
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise RefusalError(f"--image-digest-file {path}: cannot read JSON ({exc}); give a file "
                           'like {"instance_id": "sha256:<64 hex>"}', stage="options",
                           reason="bad_digest_file") from exc
    if not isinstance(data, dict):
        raise RefusalError(f"--image-digest-file {path}: expected a JSON object "
                           '{"instance_id": "sha256:..."}', stage="options",
                           reason="bad_digest_file")
    bad = [k for k, v in data.items() if not isinstance(v, str) or not DIGEST.match(v)]
    if bad:
        raise RefusalError(f"--image-digest-file {path}: not a sha256 digest for "
                           f"{', '.join(sorted(bad)[:5])}", stage="options",
                           reason="bad_digest_file")
    return {str(k): str(v) for k, v in data.items()}


def pull_settings(config: pytest.Config, run_root: Path, instance_id: str) -> PullSettings:
    pins = config.stash.get(PINS_KEY, None)
    if pins is None:
        pins = load_pins(config.getoption("image_digest_file"))
        config.stash[PINS_KEY] = pins
    return PullSettings(
        policy=config.getoption("pull"),
        mirror=config.getoption("image_mirror"),
        jobs=max(1, int(config.getoption("pull_jobs"))),
        lock_dir=state_dir(run_root) / "pulls",
        retries=max(0, int(config.getoption("pull_retries"))),
        min_free_gb=float(config.getoption("pull_min_free_gb")),
        pin=pins.get(instance_id),
    )


def image_ceiling(config: pytest.Config, run_root: Path, api: Any, holder: str,
                  progress: Progress | None = None) -> ImageCeiling | None:
    """The run's disk ceiling for ``holder`` (an instance) on the engine ``api`` talks to;
    None without ``--image-disk-ceiling-gb``."""
    gb = config.getoption("image_disk_ceiling_gb", None)
    if gb is None:
        return None
    from harness.runner.deadlines import deadlines
    from harness.sandbox.images.ceiling import ImageCeiling

    pull = deadlines(config).get("pull")
    return ImageCeiling(api, state_dir(run_root) / "images", int(float(gb) * GIB), holder,
                        wait_s=CEILING_WAIT_SHARE * pull if pull else None, progress=progress)


def pytest_harness_result_config(config: pytest.Config) -> dict[str, Any]:
    """Pull settings that change what ran are part of the run's configuration."""
    path = config.getoption("image_digest_file")
    return {"image_mirror": config.getoption("image_mirror"),
            "image_digest_file": str(Path(path).resolve()) if path else None}


def admit_images(config: pytest.Config, run: RunContext) -> None:
    pins = load_pins(config.getoption("image_digest_file"))
    config.stash[PINS_KEY] = pins
    if run.manifest is not None:
        from harness.core.models import ImagePolicy

        policy = ImagePolicy(
            pull=config.getoption("pull"), mirror=config.getoption("image_mirror"),
            digest_file=config.getoption("image_digest_file"), pins=len(pins),
            allow_image_change=bool(config.getoption("allow_image_change")))
        ceiling = config.getoption("image_disk_ceiling_gb", None)
        if ceiling is not None:
            policy.disk_ceiling_gb = float(ceiling)
        run.manifest.extra.image_policy = policy
    if pins and config.getoption("pull") != "never":
        _check_pins_exist(config, pins)
    if run.plan.ancestors:
        _check_ancestor_images(config, run)


def _docker_api() -> Any:
    from harness.sandbox.client import get_client

    return get_client(timeout=60).api


def _current_digest(api: Any, ref: str, mirror: str | None, policy: str) -> tuple[str | None,
                                                                                  str | None]:
    """(repo digest, image id) the run would use for ``ref`` now."""
    from docker.errors import ImageNotFound

    from harness.sandbox.images.pull import remote_digest

    local_id: str | None = None
    with contextlib.suppress(ImageNotFound):
        local_id = str(api.inspect_image(ref)["Id"])
    if policy == "always" or (policy == "missing" and local_id is None):
        return remote_digest(api, mirror_ref(ref, mirror)), None
    return None, local_id


def _check_pins_exist(config: pytest.Config, pins: dict[str, str]) -> None:
    """Every pinned digest must be obtainable (local, or served by the registry/mirror)."""
    from harness.sandbox.images.pull import remote_digest

    api = _docker_api()
    mirror = config.getoption("image_mirror")
    refs = _canonical_refs(config)
    checks: list[tuple[str, str]] = []
    for iid, digest in sorted(pins.items()):
        ref = refs(iid)
        if ref is None:
            continue
        repo = mirror_ref(ref, mirror).rsplit(":", 1)[0]
        checks.append((iid, f"{repo}@{digest}"))

    def served(item: tuple[str, str]) -> bool:
        _, pinned = item
        try:
            api.inspect_image(pinned)
            return True
        except Exception:
            return remote_digest(api, pinned) is not None

    with ThreadPoolExecutor(max_workers=8) as pool:
        missing = [iid for (iid, _), ok in zip(checks, pool.map(served, checks), strict=True)
                   if not ok]
    if missing:
        raise RefusalError(
            f"--image-digest-file: no image with the pinned digest for {', '.join(missing[:5])}"
            f"{' ...' if len(missing) > 5 else ''} (neither local nor served by the registry); "
            "fix the pins or push the pinned images", stage="images", reason="image_pin_mismatch")


def _canonical_refs(config: pytest.Config) -> Callable[[str], str | None]:
    """instance id -> canonical image reference, from the benchmarks' adapters."""
    adapters = [a for group in config.hook.pytest_harness_adapters(config=config) for a in group]

    def lookup(instance_id: str) -> str | None:
        for adapter in adapters:
            image_ref = getattr(adapter, "image_ref", None)
            if image_ref is not None:
                ref = image_ref(instance_id)
                if ref:
                    return str(ref)
        return None

    return lookup


def _ancestor_rows(run: RunContext) -> list[dict[str, TaskRow]]:
    """The latest row per instance of each ancestor, nearest first: as the resume read them
    (the controller's), else read here."""
    if run.ancestry is not None:
        return run.ancestry.rows
    from harness.run.ledger import ledger_path, read_ledger

    out: list[dict[str, TaskRow]] = []
    for root in run.plan.ancestors:
        try:
            out.append(read_ledger(ledger_path(Path(root))).latest)
        except OSError:
            continue
    return out


def _check_ancestor_images(config: pytest.Config, run: RunContext) -> None:
    """A resume refuses instances whose image changed since the ancestor ran them."""
    recorded: dict[str, dict[str, Any]] = {}
    for rows in reversed(_ancestor_rows(run)):  # nearest ancestor last: it wins
        for key, row in rows.items():
            image = row.details.engine.image
            if image is not None and image.get("ref"):
                recorded[key] = image
    # Carried rows count too: a resumed result must not mix two images of one task.
    if run.plan.selection is not None:
        selected = set(run.plan.selection)
        recorded = {k: v for k, v in recorded.items() if k in selected}
    if not recorded:
        return
    api = _docker_api()
    mirror, policy = config.getoption("image_mirror"), config.getoption("pull")

    def changed(item: tuple[str, dict[str, Any]]) -> str | None:
        key, image = item
        digest, local_id = _current_digest(api, str(image["ref"]), mirror, policy)
        if digest is not None and image.get("repo_digest") and digest != image["repo_digest"]:
            return f"{key} ({image['repo_digest'][:19]} -> {digest[:19]})"
        if local_id is not None and image.get("id") and local_id != image["id"]:
            return f"{key} (image id {str(image['id'])[:19]} -> {local_id[:19]})"
        return None

    with ThreadPoolExecutor(max_workers=8) as pool:
        diffs = [d for d in pool.map(changed, sorted(recorded.items())) if d]
    if not diffs:
        return
    if config.getoption("allow_image_change"):
        if run.manifest is not None:
            run.manifest.extra.image_changes_allowed = diffs
        return
    raise RefusalError(
        f"resume: the image of {len(diffs)} instance(s) changed since the ancestor ran: "
        f"{'; '.join(diffs[:3])}{' ...' if len(diffs) > 3 else ''}; pass --allow-image-change "
        "to run them anyway (recorded), or pin the old digests with --image-digest-file",
        stage="resume", reason="image_changed")


def pytest_harness_session_results(config: pytest.Config, run: RunContext,
                                   rows: dict[str, TaskRow],
                                   append: Callable[[TaskRow], None]) -> None:
    """Every instance's image (ref, pulled from, digest, id) goes into the manifest."""
    if run.manifest is None:
        return
    images = {key: row.details.engine.image for key, row in sorted(rows.items())
              if row.details.engine.image is not None}
    if images:
        run.manifest.images = images
