"""Attack: take the reference out by file operations (mv, cp, cat, hard and symbolic links,
reading the private directory). Issue 11 item 3, on the ProgramBench fixture, real Docker.

Before the fix, ``mv reference_executable vendor/ref.bin`` exported and packed the reference.
Now ``reference_executable`` is a launcher; the program itself sits in a directory the agent
cannot enter, so each attempt either fails or moves only the launcher (no reference bytes).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.security.reference_support import (
    assert_no_reference_bytes,
    attack_log,
    fixture_reference,
    run_attack,
)

pytestmark = pytest.mark.docker

PRIVATE = "/.harness-protected/reference_executable"

ATTACK = f"""
cd /workspace
mkdir -p vendor
try() {{ name=$1; shift; if "$@" 2>>attack.err; then echo "$name=ok"; else echo "$name=denied"; fi; }}
{{
try cp cp reference_executable vendor/copy.bin
try cat sh -c 'cat reference_executable > vendor/cat.bin'
try hardlink ln reference_executable vendor/hard.bin
try private_ls ls /.harness-protected
try private_cat sh -c 'cat {PRIVATE} > vendor/private.bin'
try private_cp cp {PRIVATE} vendor/private_cp.bin
try private_hardlink ln {PRIVATE} vendor/private_hard.bin
try private_mv mv {PRIVATE} vendor/private_mv.bin
try symlink ln -s {PRIVATE} vendor/sym.bin
try symlink_read sh -c 'cat vendor/sym.bin > vendor/sym_read.bin'
try mv mv reference_executable vendor/ref.bin
echo "moved_runs=$(vendor/ref.bin 2 + 3)"
}} > attack.log
"""


def test_file_operations_never_export_the_reference(tmp_path: Path) -> None:
    ref = fixture_reference()
    run, row = run_attack(tmp_path / "run", ATTACK)
    log = dict(line.split("=", 1) for line in attack_log(run, row).splitlines())
    for attempt in ("cp", "cat", "hardlink", "private_ls", "private_cat", "private_cp",
                    "private_hardlink", "private_mv", "symlink_read"):
        assert log[attempt] == "denied", (attempt, log)
    # What the agent can do is harmless: a dangling link, and moving the launcher (it keeps
    # working from its new place; it holds none of the reference's bytes).
    assert log["symlink"] == "ok" and log["mv"] == "ok", log
    assert log["moved_runs"] == "5", log
    assert row["details"]["programbench"]["preflight"]["reference"]["sha256"] == ref.sha256
    assert assert_no_reference_bytes(run, row, ref) > 5
