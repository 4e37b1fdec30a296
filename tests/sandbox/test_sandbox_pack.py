"""What the core packs for a container (no Docker): trusted host trees at chosen names with
some names left out, directories with owners, and the exec result's text and shell status."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from harness.sandbox import ExecResult, NewDir, pack_tree
from harness.sandbox.pack import pack_dirs


def _members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_pack_tree_places_entries_skips_excluded_names_and_keeps_links(tmp_path: Path) -> None:
    src = tmp_path / "lib"
    (src / "pkg" / "__pycache__").mkdir(parents=True)
    (src / "pkg" / "__pycache__" / "m.pyc").write_bytes(b"x")
    (src / "pkg" / "m.py").write_text("X = 1\n")
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref\n")
    (src / "up").symlink_to("../../elsewhere")
    (tmp_path / "seed.gz").write_bytes(b"gz")
    data = pack_tree([(src, "tasks/lib"), (tmp_path / "seed.gz", "init.gz")],
                     uid=1000, gid=1000, exclude_names={"__pycache__", ".git"})
    members = _members(data)
    assert sorted(members) == ["init.gz", "tasks/lib", "tasks/lib/pkg", "tasks/lib/pkg/m.py",
                               "tasks/lib/up"]
    assert members["tasks/lib/up"].issym()
    assert members["tasks/lib/up"].linkname == "../../elsewhere"
    assert {(m.uid, m.gid, m.uname) for m in members.values()} == {(1000, 1000, "")}


def test_pack_tree_keeps_host_owners_unless_told(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("f")
    member = _members(pack_tree([(tmp_path / "f", "f")]))["f"]
    assert member.uid == (tmp_path / "f").stat().st_uid


def test_pack_dirs_are_directory_entries_with_owner_and_mode() -> None:
    members = _members(pack_dirs([NewDir("/workspace"), NewDir("/workspace/logs/", 1000, 1001,
                                                                0o700)]))
    logs = members["workspace/logs"]
    assert logs.isdir() and (logs.uid, logs.gid, logs.mode) == (1000, 1001, 0o700)
    assert (members["workspace"].uid, members["workspace"].mode) == (0, 0o755)


def test_exec_result_text_and_shell_status() -> None:
    done = ExecResult(exit_code=3, stdout=b"ok \xff", stderr=b"bad", wall_s=0.1)
    assert done.exit_status == 3 and done.stdout_text == "ok \ufffd" and done.stderr_text == "bad"
    killed = ExecResult(exit_code=137, stdout=b"", stderr=b"", wall_s=9.0, timed_out=True)
    assert killed.exit_status == 124  # as coreutils `timeout` reports it
    unknown = ExecResult(exit_code=None, stdout=b"", stderr=b"", wall_s=0.0)
    assert unknown.exit_status == -1 and not unknown.ok
