"""Point 4: tar streams in and out: modes, symlinks (also pointing outside), empty dirs."""

from __future__ import annotations

import os
import stat
import tarfile
from pathlib import Path

import pytest

from harness.sandbox.container import Sandbox
from harness.sandbox.errors import CopyFailed


def _tree(root: Path) -> Path:
    src = root / "src"
    (src / "pkg" / "sub").mkdir(parents=True)
    (src / "empty" / "deeper").mkdir(parents=True)
    (src / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (src / "run.sh").chmod(0o755)
    (src / "secret.txt").write_text("private\n")
    (src / "secret.txt").chmod(0o600)
    (src / "pkg" / "mod.py").write_text("X = 1\n")
    (src / "pkg" / "sub" / "data.bin").write_bytes(bytes(range(256)))
    (src / "link_in").symlink_to("pkg/mod.py")
    (src / "link_abs").symlink_to("/etc/hostname")
    (src / "link_up").symlink_to("../../outside-of-tree")
    (src / "dangling").symlink_to("does-not-exist")
    return src


LISTING = "cd /workspace/in && find . -mindepth 1 -printf '%p %m %u %y %l\\n' | sort"


def test_copy_in_keeps_modes_symlinks_empty_dirs_and_sets_owner(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    sandbox.copy_in(_tree(tmp_path), "/workspace/in", uid=1000, gid=1000)
    lines = sandbox.exec(LISTING).stdout.decode().splitlines()
    assert lines == [
        "./dangling 777 agent l does-not-exist",
        "./empty 755 agent d ",
        "./empty/deeper 755 agent d ",
        "./link_abs 777 agent l /etc/hostname",
        "./link_in 777 agent l pkg/mod.py",
        "./link_up 777 agent l ../../outside-of-tree",
        "./pkg 755 agent d ",
        "./pkg/mod.py 644 agent f ",
        "./pkg/sub 755 agent d ",
        "./pkg/sub/data.bin 644 agent f ",
        "./run.sh 755 agent f ",
        "./secret.txt 600 agent f ",
    ]
    assert (
        sandbox.exec("/workspace/in/run.sh && cat /workspace/in/link_in").stdout == b"ran\nX = 1\n"
    )
    # The agent owns what it was given: it can write there.
    assert sandbox.exec("echo more >> /workspace/in/secret.txt && echo ok").stdout == b"ok\n"


def test_copy_in_a_single_file_and_bytes(sandbox: Sandbox, tmp_path: Path) -> None:
    (tmp_path / "one.txt").write_text("one\n")
    sandbox.copy_in(tmp_path / "one.txt", "/opt/new/dir")
    sandbox.write_file("/opt/bytes/blob.bin", b"\x00\x01binary", mode=0o640, uid=1000, gid=1000)
    res = sandbox.exec(
        "cat /opt/new/dir/one.txt; stat -c '%a %U' /opt/bytes/blob.bin; od -An -c /opt/bytes/blob.bin",
        user="root",
    )
    out = res.stdout.decode().splitlines()
    assert out[0] == "one" and out[1] == "640 agent" and "b   i   n" in out[2]


def test_copy_out_round_trip_preserves_and_does_not_follow_links(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    src = _tree(tmp_path)
    sandbox.copy_in(src, "/workspace/in", uid=1000, gid=1000)
    outside = tmp_path / "outside-of-tree"  # where link_up points, seen from dest/x/
    dest = tmp_path / "dest" / "x"
    written = sandbox.copy_out("/workspace/in", dest)
    assert "pkg/sub/data.bin" in written and "empty/deeper" in written
    assert (dest / "pkg" / "sub" / "data.bin").read_bytes() == bytes(range(256))
    assert stat.S_IMODE((dest / "run.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((dest / "secret.txt").stat().st_mode) == 0o600
    assert (dest / "empty" / "deeper").is_dir() and not any((dest / "empty" / "deeper").iterdir())
    assert os.readlink(dest / "link_abs") == "/etc/hostname"
    assert os.readlink(dest / "link_up") == "../../outside-of-tree"
    assert os.readlink(dest / "dangling") == "does-not-exist"
    assert not outside.exists()
    assert (dest / "run.sh").stat().st_uid == os.getuid()  # owned by the host user


def test_copy_out_of_a_missing_path_is_infra(sandbox: Sandbox, tmp_path: Path) -> None:
    with pytest.raises(CopyFailed) as info:
        sandbox.copy_out("/no/such/dir", tmp_path / "out")
    assert info.value.reason_code == "copy_failed"


def test_export_tar_gz_relative_entries_with_exclusions(sandbox: Sandbox, tmp_path: Path) -> None:
    sandbox.copy_in(_tree(tmp_path), "/workspace", uid=1000, gid=1000)
    sandbox.exec("mkdir -p .git/objects && echo x > .git/objects/a && git --version > build.log")
    out = tmp_path / "out" / "submission.tar.gz"
    names = sandbox.export_tar_gz(
        "/workspace", out, exclude=lambda rel: rel == ".git" or rel.endswith(".log")
    )
    with tarfile.open(out, "r:gz") as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert sorted(members) == sorted(names)
        assert (
            ".git" not in members and ".git/objects/a" not in members and "build.log" not in members
        )
        assert {"run.sh", "pkg/mod.py", "pkg/sub/data.bin", "empty/deeper", "link_up"} <= set(
            members
        )
        assert not any(n.startswith(("/", "./", "workspace")) for n in members)
        assert (
            members["run.sh"].mode & 0o777 == 0o755 and members["secret.txt"].mode & 0o777 == 0o600
        )
        assert members["link_up"].issym() and members["link_up"].linkname == "../../outside-of-tree"
        assert members["empty/deeper"].isdir()
        data = tar.extractfile("pkg/sub/data.bin")
        assert data is not None and data.read() == bytes(range(256))
    assert not [p for p in out.parent.iterdir() if p.name != "submission.tar.gz"], (
        "no temp file left"
    )
    assert out.stat().st_mode & 0o777 == 0o600
