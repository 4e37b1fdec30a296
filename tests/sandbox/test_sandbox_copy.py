"""Point 4: tar streams in and out: modes, symlinks (also pointing outside), empty dirs;
issue 11: copy-out bounded (bytes, files), inert (specials, setuid), protected bytes dropped."""

from __future__ import annotations

import hashlib
import os
import stat
import tarfile
from pathlib import Path

import pytest

from harness.core.errors import InfraError
from harness.runner.sandbox_fixtures import SandboxFactory
from harness.sandbox import NewDir, pack_tree
from harness.sandbox.container import Sandbox
from harness.sandbox.errors import CopyFailed
from harness.sandbox.transfer import CopyLimits, CopyRefused, CopyTooLarge, TooManyFiles

pytestmark = pytest.mark.docker


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


def test_make_dirs_and_put_archive_go_through_the_daemon_without_capabilities(
    sandbox_factory: SandboxFactory, sandbox_image: str, tmp_path: Path
) -> None:
    """Root without CAP_CHOWN cannot give a directory to the agent; the daemon can."""
    box = sandbox_factory(sandbox_image, cap_drop=("ALL",), no_new_privileges=True,
                          workdir="/")  # fmt: skip
    assert not box.exec(["chown", "1000", "/tmp"], user="root").ok  # no capability
    box.make_dirs([NewDir("/srv/job"), NewDir("/srv/job/out", 1000, 1000, 0o750)])
    lib = tmp_path / "lib"
    (lib / ".git").mkdir(parents=True)
    (lib / ".git" / "HEAD").write_text("ref\n")
    (lib / "m.py").write_text("X = 1\n")
    box.put_archive("/srv/job/out", pack_tree([(lib, "lib")], uid=1000, gid=1000,
                                              exclude_names={".git"}))  # fmt: skip
    # listed as the agent: root without CAP_DAC_OVERRIDE cannot read a 0750 agent directory
    listing = "cd /srv/job && find . -mindepth 1 -printf '%p %m %u\\n' | sort"
    assert box.exec(listing, user="agent").stdout_text.splitlines() == [
        "./out 750 agent", "./out/lib 755 agent", "./out/lib/m.py 644 agent",
    ]
    assert box.exec("stat -c '%U %a' /srv/job", user="root").stdout_text == "root 755\n"
    with pytest.raises(CopyFailed):  # an archive needs an existing directory
        box.put_archive("/no/such/dir", pack_tree([(lib / "m.py", "m.py")]))


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


def test_a_copied_folder_the_agent_replaced_by_a_link_comes_out_as_an_empty_folder(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """The host reads fixed names under a copied-out folder (``agent/events.jsonl``) with
    ``harness.core.untrusted``, which refuses a link in the last component only: the folder
    itself must never arrive as a link to a host directory."""
    res = sandbox.exec("mkdir -p /workspace/logs && rm -rf /workspace/logs && "
                       "ln -s /etc /workspace/logs", user="root", timeout=30)
    assert res.exit_code == 0, res.stderr
    dest = tmp_path / "logs"
    assert sandbox.copy_out("/workspace/logs", dest) == []
    assert dest.is_dir() and not dest.is_symlink() and not any(dest.iterdir())


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


# -- copy-out is bounded and inert (issue 11) -------------------------------------------


def _ls(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_sparse_file_is_refused_from_its_header_and_nothing_is_left(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    sandbox.exec("echo ok > a.txt && truncate -s 3G sparse.bin").check()
    sandbox.copy_limits = CopyLimits(max_bytes=64 << 20, max_files=100)
    out = tmp_path / "out"
    with pytest.raises(CopyTooLarge) as big:
        sandbox.export_tar_gz("/workspace", out / "sub.tar.gz")
    assert big.value.reason_code == "submission_too_large" and "sparse.bin" in str(big.value)
    assert _ls(out) == []  # no partial archive, no temporary file
    with pytest.raises(CopyTooLarge):
        sandbox.copy_out("/workspace", tmp_path / "tree")
    du = sum(p.lstat().st_blocks * 512 for p in tmp_path.rglob("*"))
    assert du < 1 << 20, du


def test_excluded_caches_are_bounded_too(sandbox: Sandbox, tmp_path: Path) -> None:
    sandbox.exec("mkdir -p node_modules && truncate -s 2G node_modules/blob && echo x > a").check()
    sandbox.copy_limits = CopyLimits(max_bytes=16 << 20, max_files=100)
    with pytest.raises(CopyTooLarge) as big:
        sandbox.export_tar_gz("/workspace", tmp_path / "s.tar.gz",
                              exclude=lambda rel: rel == "node_modules")
    assert "excluded caches included" in str(big.value)


def test_too_many_files(sandbox: Sandbox, tmp_path: Path) -> None:
    sandbox.exec("mkdir many && cd many && seq 1 300 | xargs touch").check()
    sandbox.copy_limits = CopyLimits(max_bytes=1 << 20, max_files=200)
    with pytest.raises(TooManyFiles) as many:
        sandbox.copy_out("/workspace", tmp_path / "tree")
    assert many.value.reason_code == "too_many_files"
    assert isinstance(many.value, CopyRefused) and not isinstance(many.value, InfraError)


def test_fifos_devices_setuid_and_chmod_000_are_inert(sandbox: Sandbox, tmp_path: Path) -> None:
    sandbox.exec(
        "mkfifo pipe && echo s > suid && chmod 4755 suid && mkdir locked && echo l > locked/f"
        " && chmod 000 locked/f locked && ln -s /etc/passwd pw && ln -s /root rootdir"
    ).check()
    sandbox.exec("mknod /workspace/null c 1 3", user="root").check()
    dest = tmp_path / "tree"
    written = sandbox.copy_out("/workspace", dest)
    assert sorted(written) == ["locked", "locked/f", "pw", "rootdir", "suid"]
    assert stat.S_IMODE((dest / "suid").stat().st_mode) == 0o755  # setuid dropped
    assert (dest / "locked" / "f").read_text() == "l\n"  # the daemon reads as root
    assert os.readlink(dest / "pw") == "/etc/passwd" and (dest / "pw").is_symlink()
    names = sandbox.export_tar_gz("/workspace", tmp_path / "s.tar.gz")
    assert "pipe" not in names and "null" not in names
    with tarfile.open(tmp_path / "s.tar.gz", "r:gz") as tar:
        assert tar.getmember("suid").mode == 0o755 and tar.getmember("pw").issym()


def test_bytes_of_a_protected_artifact_never_come_out(sandbox: Sandbox, tmp_path: Path) -> None:
    ref = b"\x7fELF reference bytes " * 100
    sandbox.write_file("/workspace/vendor/ref.bin", ref, uid=1000, gid=1000)
    sandbox.write_file("/workspace/deep/er/renamed", ref, mode=0o755, uid=1000, gid=1000)
    sandbox.write_file("/workspace/same_size", b"y" * len(ref), uid=1000, gid=1000)
    sandbox.exec("ln deep/er/renamed hard").check()  # a second name of the same bytes
    sandbox.protected_hashes = {hashlib.sha256(ref).hexdigest(): len(ref)}
    written = sandbox.copy_out("/workspace", tmp_path / "tree")
    assert "same_size" in written
    assert not {"vendor/ref.bin", "deep/er/renamed", "hard"} & set(written)
    names = sandbox.export_tar_gz("/workspace", tmp_path / "s.tar.gz")
    assert "same_size" in names and not {"vendor/ref.bin", "deep/er/renamed", "hard"} & set(names)
    from benchmarks.programbench.collect import WorkspaceFacts, export_submission

    info = export_submission(sandbox, tmp_path / "submission.tar.gz", facts=WorkspaceFacts(),
                             protected_paths=[])
    assert info.protected_dropped == ["deep/er/renamed", "vendor/ref.bin"]
    assert "hard" in info.excluded  # its bytes went with its first name
    with tarfile.open(info.path, "r:gz") as tar:
        for member in tar.getmembers():
            data = tar.extractfile(member) if member.isreg() else None
            assert data is None or data.read() != ref

