"""``harness images list|prune`` touch only what this harness pulled or built."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from harness.sandbox.images.inventory import Inventory, inventory_path, record_use

pytestmark = pytest.mark.docker


def tiny_image(tag: str) -> str:
    """An image of one small file, with no harness label (docker import)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(f"marker-{tag.replace(':', '-').replace('/', '-')}")
        data = tag.encode()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    out = subprocess.run(["docker", "import", "-", tag], input=buf.getvalue(),
                         capture_output=True, check=True)
    return out.stdout.decode().strip()


def images(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["harness", "images", *args], capture_output=True, text=True, env=env)


def test_prune_removes_only_old_pulled_images_and_never_foreign_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    env = {**os.environ, "HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    run = tmp_path.name[-12:].lower()
    ours = tiny_image(f"harness-test/pulled-{run}:1")
    foreign = tiny_image(f"harness-test/foreign-{run}:1")
    try:
        record_use(ours, [f"harness-test/pulled-{run}:1"], pulled=True)
        record_use(foreign, [f"harness-test/foreign-{run}:1"], pulled=False)  # used, not pulled
        inv = Inventory.model_validate_json(inventory_path().read_text())
        assert set(inv.pulled) == {ours}
        inv.pulled[ours].last_used_unix -= 3 * 86400  # last used three days ago
        inventory_path().write_text(inv.model_dump_json(by_alias=True))

        listed = images("list", env=env)
        assert listed.returncode == 0, listed.stderr
        assert f"pulled-{run}" in listed.stdout and f"foreign-{run}" not in listed.stdout

        recent = images("prune", "--unused-for", "5", "--kind", "pulled", env=env)
        assert json.loads(recent.stdout.splitlines()[-1]) == {"removed": 0, "failed": 0}
        pruned = images("prune", "--unused-for", "2", "--kind", "pulled", env=env)
        assert pruned.returncode == 0, pruned.stderr
        assert json.loads(pruned.stdout.splitlines()[-1]) == {"removed": 1, "failed": 0}
        left = subprocess.run(["docker", "images", "-q", "--no-trunc"], capture_output=True,
                              text=True, check=True).stdout.split()
        assert ours not in left and foreign in left
    finally:
        subprocess.run(["docker", "rmi", "-f", ours, foreign], capture_output=True)
