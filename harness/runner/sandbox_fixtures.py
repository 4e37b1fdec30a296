"""pytest plugin: Docker sandbox fixtures for benchmark instances.

Register it once (``pytest_plugins = ["harness.runner.sandbox_fixtures"]``). Fixtures:

``sandbox_client`` (session)
    A pinged Docker client; :class:`DockerUnavailable` (``docker_unavailable``) if not.
``sandbox_base_image`` (session)
    :func:`ensure_image` of the shared :func:`base_recipe` (built once per machine).
``sandbox_image`` / ``sandbox_options`` (function)
    The image and :class:`SandboxSpec` fields of the default ``sandbox``; override
    them in a benchmark's conftest (defaults: the base image, user ``agent``,
    ``SYS_PTRACE`` dropped, no network).
``sandbox_factory`` (function)
    ``sandbox_factory(image, **spec_fields) -> Sandbox`` and
    ``sandbox_factory.network() -> name``: labelled with the current instance (from
    the ``harness_instance`` fixture: ``run_id``, ``run_root``, ``instance_id``,
    ``worker_id``, optional ``timeout_s``), removed at teardown and verified gone,
    unless ``--keep-sandboxes`` (then a warning names the sweep command); then what the
    instance asked to run at its end (``sandbox_factory.on_close(fn)``: the release of the
    images it held under ``--image-disk-ceiling-gb``). Every sandbox
    gets the copy-out caps of ``--max-copy-out-mb`` and ``--max-copy-out-files``.
    it creates runs under ``--runtime NAME`` when given (an OCI runtime registered with
    dockerd, e.g. gVisor's ``runsc``; checked at admission, recorded in the run's config).
``sandbox`` (function)
    One default sandbox from ``sandbox_factory(sandbox_image, **sandbox_options)``.

Every failure here is an :class:`~harness.core.errors.InfraError` with a reason code.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from harness.core.errors import RefusalError
from harness.sandbox.limits import DEFAULT_MAX_COPY_FILES, DEFAULT_MAX_COPY_MB, CopyLimits

# Docker and the sandbox modules load when a fixture runs, not when pytest collects.

if TYPE_CHECKING:
    import docker

    from harness.runner.instance import RunContext
    from harness.sandbox.container import Sandbox
    from harness.sandbox.images.build import BuiltImage
    from harness.sandbox.reattach import SandboxRecord

TTL_MARGIN_S = 600
DEFAULT_TTL_S = 3600


# Its options (--keep-sandboxes, --max-copy-out-mb/-files, --runtime) are the runner's; this
# plugin registers them when it is used alone, without the runner.
pytest_plugins = ["harness.runner.options"]


def copy_limits(config: pytest.Config) -> CopyLimits:
    """The copy-out caps given on the command line (defaults when not registered)."""
    mb = config.getoption("max_copy_out_mb", DEFAULT_MAX_COPY_MB)
    files = config.getoption("max_copy_out_files", DEFAULT_MAX_COPY_FILES)
    return CopyLimits(max_bytes=int(mb) << 20, max_files=int(files))



def sandbox_runtime(config: pytest.Config) -> str | None:
    """The ``--runtime`` of the agent sandboxes (None: the daemon's default)."""
    value = config.getoption("sandbox_runtime", None)
    return str(value) if value else None


@pytest.hookimpl(optionalhook=True)  # the runner's hooks: this plugin also works alone
def pytest_harness_result_config(config: pytest.Config) -> dict[str, Any]:
    """``sandbox.runtime`` when given (absent and None compare equal on resume)."""
    runtime = sandbox_runtime(config)
    return {"sandbox.runtime": runtime} if runtime else {}


def admit_runtime(config: pytest.Config, run: RunContext) -> None:
    """Refuse a ``--runtime`` the daemon does not know; record its path and arguments."""
    runtime = sandbox_runtime(config)
    if runtime is None or run.dry_run:
        return
    from harness.sandbox.client import get_client  # the Docker SDK: only when asked for
    from harness.sandbox.errors import DockerUnavailable
    from harness.sandbox.runtimes import RuntimeNotRegistered, runtime_entry

    try:
        entry = runtime_entry(runtime, get_client())
    except DockerUnavailable:
        return  # each instance fails as infrastructure (docker_unavailable) anyway
    except RuntimeNotRegistered as exc:
        raise RefusalError(str(exc), stage="sandbox", reason="runtime_unavailable") from exc
    if run.manifest is not None:
        run.manifest.extra.sandbox_runtime = entry


class SandboxFactory:
    """Creates sandboxes and internal networks for one instance; cleans them up."""

    def __init__(
        self,
        client: docker.DockerClient,
        instance: Any,
        limits: CopyLimits | None = None,
        runtime: str | None = None,
    ) -> None:
        self.client = client
        self.instance = instance
        self.limits = limits or CopyLimits()
        self.runtime = runtime
        self.sandboxes: list[Sandbox] = []
        self.networks: list[str] = []
        self.closing: list[Callable[[], None]] = []
        timeout = getattr(instance, "timeout_s", None)
        self.ttl_s = int(timeout) + TTL_MARGIN_S if timeout else DEFAULT_TTL_S

    def __call__(self, image: str | BuiltImage, **fields: Any) -> Sandbox:
        from harness.sandbox.container import Sandbox, SandboxSpec
        from harness.sandbox.images.build import BuiltImage
        from harness.sandbox.images.transfer import ensure_on_engine

        ref = image.image_id if isinstance(image, BuiltImage) else image
        ensure_on_engine(ref, self.client)  # placed on another engine: bring the image
        fields.setdefault("ttl_s", self.ttl_s)
        fields.setdefault("runtime", self.runtime)
        spec = SandboxSpec(
            image=ref,
            run_id=self.instance.run_id,
            instance_id=self.instance.instance_id,
            run_root=self.instance.run_root,
            worker=self.instance.worker_id,
            **fields,
        )
        sandbox = Sandbox.create(spec, client=self.client)
        sandbox.copy_limits = self.limits
        self.sandboxes.append(sandbox)
        return sandbox

    def adopt(self, record: SandboxRecord) -> Sandbox:
        """Take over a sandbox an earlier run kept for a reattach (:mod:`.reattach`); it is
        removed with this instance's sandboxes unless kept again. Raises
        :class:`~harness.sandbox.reattach.ReattachUnavailable`."""
        from harness.sandbox.reattach import adopt

        sandbox = adopt(self.client, record)
        sandbox.copy_limits = self.limits
        self.sandboxes.append(sandbox)
        return sandbox

    def keep(self, sandbox: Sandbox) -> None:
        """Leave ``sandbox`` running when the instance ends: an agent server's task still
        works in it (a resume reattaches). Only a sandbox labelled for a reattach; its TTL
        ends it when nobody comes back."""
        from harness.sandbox import labels as L

        labels = (self.client.api.inspect_container(sandbox.id).get("Config") or {}).get(
            "Labels") or {}
        if not labels.get(L.REATTACH):
            raise ValueError(f"sandbox {sandbox.name} was not created for a reattach")
        if sandbox in self.sandboxes:
            self.sandboxes.remove(sandbox)

    def on_close(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` when the instance ends, after its sandboxes were removed (or kept)."""
        self.closing.append(fn)

    def run_closing(self) -> None:
        """What :meth:`on_close` registered, last first; each runs whatever the others do."""
        while self.closing:
            fn = self.closing.pop()
            try:
                fn()
            except Exception as exc:  # an image left behind: said, never the verdict's
                warnings.warn(f"{self.instance.key}: at the instance's end: {exc}",
                              stacklevel=1)

    def network(self) -> str:
        from harness.sandbox.network import create_internal_network

        name = create_internal_network(
            self.instance.run_id,
            self.instance.instance_id,
            self.instance.worker_id,
            self.instance.run_root,
            client=self.client,
        )
        self.networks.append(name)
        return name

    def close(self) -> None:
        """Remove every sandbox (verified by listing), then the networks."""
        from harness.sandbox.errors import CleanupFailed
        from harness.sandbox.network import remove_network

        errors = []
        for sandbox in reversed(self.sandboxes):
            try:
                sandbox.remove()
            except CleanupFailed as exc:
                errors.append(str(exc))
        for name in self.networks:
            remove_network(name, client=self.client)
        # The name filter matches substrings: compare exact names.
        left = [
            n
            for n in self.networks
            if any(net["Name"] == n for net in self.client.api.networks(names=[n]))
        ]
        if left:
            errors.append(f"networks still listed after removal: {', '.join(left)}")
        if errors:
            raise CleanupFailed("; ".join(errors))


@pytest.fixture(scope="session")
def sandbox_client() -> docker.DockerClient:
    from harness.sandbox.client import get_client
    from harness.sandbox.placement import controller_environment

    return get_client(environment=controller_environment())


@pytest.fixture(scope="session")
def sandbox_base_image(sandbox_client: docker.DockerClient) -> BuiltImage:
    from harness.sandbox.images.build import base_recipe, ensure_image

    return ensure_image(base_recipe(), client=sandbox_client)


@pytest.fixture
def sandbox_image(sandbox_base_image: BuiltImage) -> str:
    return sandbox_base_image.image_id


@pytest.fixture
def sandbox_options() -> dict[str, Any]:
    return {"user": "agent", "cap_drop": ("SYS_PTRACE",), "network": "none"}


@pytest.fixture
def sandbox_factory(
    request: pytest.FixtureRequest, sandbox_client: docker.DockerClient, harness_instance: Any
) -> Iterator[SandboxFactory]:
    from harness.sandbox.client import get_client
    from harness.sandbox.placement import active as active_slot

    client = get_client() if active_slot() else sandbox_client  # the instance's engine
    factory = SandboxFactory(client, harness_instance, copy_limits(request.config),
                             sandbox_runtime(request.config))
    yield factory
    try:
        _close(request.config, factory, harness_instance)
    finally:
        factory.run_closing()


def _close(config: pytest.Config, factory: SandboxFactory, harness_instance: Any) -> None:
    if config.getoption("keep_sandboxes", False):
        if factory.sandboxes or factory.networks:
            names = ", ".join(s.name for s in factory.sandboxes)
            warnings.warn(
                f"--keep-sandboxes: kept {names or 'networks'}; remove with "
                f"`harness sweep --run {harness_instance.run_id}`",
                stacklevel=1,
            )
        return
    from harness.runner.deadlines import PhaseTimeout, phase

    try:
        with phase(config, "teardown"):
            factory.close()
    except PhaseTimeout as exc:  # the verdict stands; the run's final sweep removes the rest
        warnings.warn(f"{harness_instance.key}: {exc}; the run's final sweep removes what is "
                      f"left", stacklevel=1)


@pytest.fixture
def sandbox(
    sandbox_factory: SandboxFactory, sandbox_image: str, sandbox_options: dict[str, Any]
) -> Sandbox:
    return sandbox_factory(sandbox_image, **sandbox_options)


__all__ = ["SandboxFactory"]
