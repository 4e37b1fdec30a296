"""A sandbox kept for a reattach, on the real engine: the instance's cleanup and the runner's
automatic sweeps leave it running; an operator's sweep removes it; adopting it again checks
that it is the same sandbox with the same protected files, and refuses anything else."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from harness.runner.sandbox_fixtures import SandboxFactory
from harness.sandbox import labels as L
from harness.sandbox.cleanup import kept_sandboxes, sweep
from harness.sandbox.container import Sandbox
from harness.sandbox.images.build import BuiltImage
from harness.sandbox.protected import PROTECTED_SANDBOX_CAP_DROP, PROTECTED_SANDBOX_ULIMITS
from harness.sandbox.reattach import (
    ReattachUnavailable,
    adopt,
    read_record,
    record_of,
    write_record,
)
from tests.sandbox.conftest import StandInInstance

pytestmark = pytest.mark.docker

REF = "/workspace/reference_executable"


def make(factory: SandboxFactory, image: BuiltImage, kept: bool) -> Sandbox:
    return factory(image, user="agent", network="none", cap_drop=PROTECTED_SANDBOX_CAP_DROP,
                   ulimits=PROTECTED_SANDBOX_ULIMITS,
                   labels={L.REATTACH: "gateway"} if kept else {})


def test_kept_sandbox_outlives_cleanup_and_automatic_sweeps_until_an_operator_sweeps(
        docker_client: docker.DockerClient, base_image: BuiltImage,
        harness_instance: StandInInstance, protected_elf: Path) -> None:
    factory = SandboxFactory(docker_client, harness_instance)
    kept = make(factory, base_image, kept=True)
    plain = make(factory, base_image, kept=False)
    kept.install_protected(protected_elf, REF)
    write_record(harness_instance.instance_dir, record_of(kept))
    with pytest.raises(ValueError, match="not created for a reattach"):
        factory.keep(plain)
    factory.keep(kept)
    factory.close()
    run_id = harness_instance.run_id
    assert [k["name"] for k in kept_sandboxes(run_id)] == [kept.name]
    assert not plain.is_running()
    assert sweep(run_id, spare_kept=True) == []  # the runner's own sweeps leave it
    assert kept.is_running()

    # the resume takes it over: same container, same protected file, still not readable
    record = read_record(harness_instance.instance_dir / "sandbox.json")
    assert record is not None and record.reattachable and len(record.protected) == 1
    again = adopt(docker_client, record)
    assert again.id == kept.id and again.protected == {REF}
    assert again.protected_hashes == kept.protected_hashes
    assert again.exec(["cat", REF]).exit_code != 0  # as the agent: execute, never read
    assert b"reference output" in again.exec([REF]).stdout

    # a record naming another container, or protected bytes that changed, is refused
    forged = record.model_copy(update={"container_id": plain.id})
    with pytest.raises(ReattachUnavailable) as gone:
        adopt(docker_client, forged)
    assert gone.value.reason == "sandbox_gone"
    changed = record.model_copy(update={"protected": [record.protected[0].model_copy(
        update={"sha256": "0" * 64})]})
    with pytest.raises(ReattachUnavailable) as bad:
        adopt(docker_client, changed)
    assert bad.value.reason == "sandbox_protected_changed"
    renamed = record.model_copy(update={"instance_id": "other__inst"})
    with pytest.raises(ReattachUnavailable) as other:
        adopt(docker_client, renamed)
    assert other.value.reason == "sandbox_mismatch"

    assert kept.name in sweep(run_id)  # an operator's sweep
    assert kept_sandboxes(run_id) == []
