"""The instance steps merged into one exec each behave as the separate steps did:
:func:`~benchmarks.programbench.workspace.prepare_cleanroom` (layout, protection, git
exclusion) and :func:`~benchmarks.programbench.collect.freeze_and_probe`."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.programbench.collect import freeze_and_probe
from benchmarks.programbench.fixture import FixturePaths
from benchmarks.programbench.submission import CACHEDIR_SIGNATURE
from benchmarks.programbench.workspace import ReferencePresentFailed, prepare_cleanroom
from harness.sandbox.protected import ProtectedMissing
from tests.benchmarks.programbench.pb_support import cleanroom_sandbox

pytestmark = pytest.mark.docker

LEFTOVERS = f"""
cd /workspace && mkdir -p build target/c && echo x > build/a && git add -f build/a
printf '%s' '{CACHEDIR_SIGNATURE.decode()}' > target/c/CACHEDIR.TAG
(while :; do date > /workspace/churn; sleep 0.1; done) >/dev/null 2>&1 &
(sleep 1000 &)
"""


def test_prepare_cleanroom_protects_and_excludes(pb_fixture: FixturePaths, tmp_path: Path) -> None:
    with cleanroom_sandbox(pb_fixture.image_id, tmp_path / "run") as sandbox:
        changes, prot = prepare_cleanroom(sandbox)
        assert changes == [] and prot.sha256 == pb_fixture.reference_sha256
        assert sandbox.protected_hashes[prot.sha256] == prot.size
        res = sandbox.exec("stat -c '%u %a' reference_executable; grep '^/' .git/info/exclude")
        assert res.stdout.decode().split() == [
            "1999",
            "4111",
            "/executable",
            "/reference_executable",
        ]


def test_prepare_cleanroom_reports_the_failing_step(
    pb_fixture: FixturePaths, tmp_path: Path
) -> None:
    for setup, error, text in (
        (
            "mv /etc/passwd /etc/passwd.x; mkdir /etc/passwd",
            ReferencePresentFailed,
            "adapting the image layout failed",
        ),
        ("rm -f /workspace/executable", ProtectedMissing, "no program to protect at"),
        (
            "rm -rf /workspace/.git; echo x > /workspace/.git",
            ReferencePresentFailed,
            "excluding the reference from git failed: fatal: invalid gitfile format",
        ),
    ):
        with cleanroom_sandbox(pb_fixture.image_id, tmp_path / "run") as sandbox:
            sandbox.exec(["sh", "-c", setup], user="root", timeout=30)
            with pytest.raises(error, match=text):
                prepare_cleanroom(sandbox)


def test_freeze_and_probe_kills_leftovers_then_probes(
    pb_fixture: FixturePaths, tmp_path: Path
) -> None:
    with cleanroom_sandbox(pb_fixture.image_id, tmp_path / "run") as sandbox:
        assert sandbox.exec(["sh", "-c", LEFTOVERS], user="agent", timeout=30).exit_code == 0
        facts = freeze_and_probe(sandbox)
        assert facts.tracked_build_dirs == {"build"} and facts.cache_dirs == {"target/c"}
        left = sandbox.exec("ps -o args= -u agent", user="root", timeout=30).stdout.decode()
        assert left.strip() == "", left  # nothing of the agent's is left running
