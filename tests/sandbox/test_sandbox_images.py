"""Point 1: local images from Debian packages, tagged by content hash, built once."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import secrets
from pathlib import Path

import docker
import pytest

from harness.core.errors import InfraError
from harness.sandbox.container import Sandbox, SandboxSpec
from harness.sandbox.errors import ImageBuildFailed, ImageMissing
from harness.sandbox.images.build import (
    BaseRecipe,
    BuiltImage,
    LayerRecipe,
    base_recipe,
    build_count,
    ensure_image,
)

pytestmark = pytest.mark.docker


@pytest.fixture
def cleanup_images(docker_client: docker.DockerClient):
    """Remove the test-only images (tags) a test registers; never anything else."""
    tags: list[str] = []
    yield tags
    for tag in tags:
        with contextlib.suppress(docker.errors.NotFound):
            docker_client.images.remove(tag, force=True)


def _layer(nonce: str, body: str = "RUN echo built > /built.txt\n", **files: bytes) -> LayerRecipe:
    return LayerRecipe(
        name="harness-test/layer",
        base=base_recipe(),
        dockerfile_body=f"LABEL harness.test.nonce={nonce}\n{body}",
        files=files,
    )


# -- recipes (pure) --------------------------------------------------------------------
def test_content_hash_is_stable_and_tracks_the_recipe() -> None:
    a = BaseRecipe(include=("bash", "python3"))
    assert a.content_hash() == BaseRecipe(include=("python3", "bash", "bash")).content_hash()
    assert a.content_hash() != BaseRecipe(include=("bash",)).content_hash()
    assert a.content_hash() != BaseRecipe(include=a.include, suite="trixie").content_hash()
    assert a.tag == f"harness/base:{a.content_hash()[:24]}"
    layer = LayerRecipe(name="x/y", base=a, dockerfile_body="RUN true", files={"f": b"1"})
    assert (
        layer.content_hash()
        != LayerRecipe(
            name="x/y", base=a, dockerfile_body="RUN true", files={"f": b"2"}
        ).content_hash()
    )
    assert (
        layer.content_hash()
        != LayerRecipe(
            name="x/y",
            base=BaseRecipe(include=("bash",)),
            dockerfile_body="RUN true",
            files={"f": b"1"},
        ).content_hash()
    )


def test_shared_base_recipe_lists_the_packages_the_project_relies_on() -> None:
    recipe = base_recipe()
    assert recipe is base_recipe()
    for pkg in (
        "bash",
        "git",
        "python3-pytest-xdist",
        "python3-pytest-timeout",
        "strace",
        "iproute2",
    ):
        assert pkg in recipe.include
    assert (recipe.suite, recipe.variant) == ("bookworm", "minbase")


# -- the base image ----------------------------------------------------------------------
def test_base_image_is_cached_by_tag_and_pinned_by_id(
    docker_client: docker.DockerClient, base_image: BuiltImage
) -> None:
    assert base_image.tag == base_recipe().tag
    assert base_image.image_id.startswith("sha256:") and len(base_image.image_id) == 71
    builds = build_count(base_image.tag)
    again = ensure_image(base_recipe(), client=docker_client)
    assert again == base_image
    assert build_count(base_image.tag) == builds, "a second ensure_image must be a tag lookup"
    config = docker_client.api.inspect_image(base_image.image_id)["Config"]
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert config["Labels"]["harness.recipe"] == base_recipe().content_hash()


def test_base_image_has_the_tools_and_the_agent_user(
    base_image: BuiltImage, run_root: Path, own_run: str
) -> None:
    spec = SandboxSpec(
        image=base_image.image_id, run_id=own_run, instance_id="tools", run_root=run_root
    )
    with Sandbox.create(spec) as sb:
        res = sb.exec(
            "python3 -c 'import pytest, xdist, pytest_timeout; print(pytest.__version__)'"
            " && git --version && strace -V | head -1 && ip -V && ps --version && id agent"
            " && stat -c %U /workspace"
        )
        assert res.exit_code == 0, res.stderr
        out = res.stdout.decode()
        assert "git version" in out and "strace" in out and "uid=1000(agent)" in out
        assert out.strip().endswith("agent")


# -- layers ---------------------------------------------------------------------------
@pytest.mark.slow
def test_layer_builds_once_with_files_and_retag(
    docker_client: docker.DockerClient,
    base_image: BuiltImage,
    tmp_path: Path,
    run_root: Path,
    own_run: str,
    cleanup_images: list[str],
) -> None:
    nonce = secrets.token_hex(6)
    recipe = _layer(
        nonce,
        "COPY payload.txt /opt/payload.txt\nRUN chmod 0640 /opt/payload.txt\n",
        **{"payload.txt": b"hello layer\n"},
    )
    retag = f"harness-test/retag-{nonce}:task_cleanroom_v6"
    cleanup_images += [recipe.tag, retag]
    built = ensure_image(recipe, client=docker_client, cache_dir=tmp_path, retag=retag)
    assert built.tag == recipe.tag and built.image_id.startswith("sha256:")
    assert docker_client.api.inspect_image(retag)["Id"] == built.image_id
    assert build_count(recipe.tag, tmp_path) == 1
    assert ensure_image(recipe, client=docker_client, cache_dir=tmp_path) == built
    assert build_count(recipe.tag, tmp_path) == 1, "the second call must not build"
    spec = SandboxSpec(image=retag, run_id=own_run, instance_id="layer", run_root=run_root)
    with Sandbox.create(spec) as sb:
        res = sb.exec("cat /opt/payload.txt; stat -c %a /opt/payload.txt")
        assert res.stdout == b"hello layer\n640\n"


def _build_in_child(
    recipe: LayerRecipe,
    cache_dir: str,
    go: multiprocessing.synchronize.Event,
    out: multiprocessing.queues.Queue,
) -> None:
    go.wait(30)
    built = ensure_image(recipe, cache_dir=cache_dir)
    out.put((os.getpid(), built.image_id))


@pytest.mark.slow
def test_two_processes_asking_at_once_build_once(
    docker_client: docker.DockerClient,
    base_image: BuiltImage,
    tmp_path: Path,
    cleanup_images: list[str],
) -> None:
    recipe = _layer(secrets.token_hex(6), "RUN sleep 1 && echo slow > /slow.txt\n")
    cleanup_images.append(recipe.tag)
    ctx = multiprocessing.get_context("fork")
    go, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_build_in_child, args=(recipe, str(tmp_path), go, out)) for _ in range(2)
    ]
    for proc in procs:
        proc.start()
    go.set()
    results = [out.get(timeout=300) for _ in procs]
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    assert {pid for pid, _ in results} == {p.pid for p in procs}
    assert len({image_id for _, image_id in results}) == 1
    lines = [json.loads(line) for line in (tmp_path / "builds.jsonl").read_text().splitlines()]
    assert [line["tag"] for line in lines] == [recipe.tag], "built exactly once"


# -- failures are one clear line --------------------------------------------------------
def test_failed_layer_build_is_one_line_naming_the_recipe(
    docker_client: docker.DockerClient,
    base_image: BuiltImage,
    tmp_path: Path,
    cleanup_images: list[str],
) -> None:
    nonce = secrets.token_hex(6)
    recipe = _layer(nonce, "RUN echo about to fail && exit 7\n")
    cleanup_images.append(recipe.tag)
    try:
        with pytest.raises(ImageBuildFailed) as info:
            ensure_image(recipe, client=docker_client, cache_dir=tmp_path)
    finally:  # the failed build keeps the steps before RUN as an untagged (dangling) image
        for image in docker_client.images.list(all=True,
                                               filters={"label": f"harness.test.nonce={nonce}"}):
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                docker_client.images.remove(image.id, force=True)
    message = str(info.value)
    assert "\n" not in message
    assert "harness-test/layer" in message and "dockerfile_body" in message and "7" in message
    assert isinstance(info.value, InfraError) and info.value.reason_code == "image_build_failed"
    assert build_count(recipe.tag, tmp_path) == 0


def test_missing_debootstrap_names_the_fix(
    docker_client: docker.DockerClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    recipe = BaseRecipe(name="harness-test/nodebootstrap", setup=(f"true {secrets.token_hex(4)}",))
    with pytest.raises(ImageBuildFailed) as info:
        ensure_image(recipe, client=docker_client, cache_dir=tmp_path / "cache")
    assert "\n" not in str(info.value)
    assert "apt-get install -y debootstrap" in str(info.value)


def test_failed_debootstrap_is_one_line_and_leaves_no_work_dir(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    recipe = BaseRecipe(
        name="harness-test/badmirror", include=("bash",), mirror="http://127.0.0.1:9/debian"
    )
    cache = tmp_path / "cache"
    with pytest.raises(ImageBuildFailed) as info:
        ensure_image(recipe, client=docker_client, cache_dir=cache)
    message = str(info.value)
    assert "\n" not in message
    assert "debootstrap bookworm" in message and "mirror" in message and "full log:" in message
    assert list((cache / "work").iterdir()) == []
    assert docker_client.api.images(name="harness-test/badmirror") == []


def test_missing_image_is_image_missing(run_root: Path, own_run: str) -> None:
    spec = SandboxSpec(
        image="harness-test/never-built:nope", run_id=own_run, instance_id="x", run_root=run_root
    )
    with pytest.raises(ImageMissing) as info:
        Sandbox.create(spec)
    assert info.value.reason_code == "image_missing"
    assert "ensure_image" in str(info.value)
