"""The reference server's file tools on a host workspace (issue 43, 1): every name under
the folder is the agent's; nothing outside it is read or written, whatever it planted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.agents.reference_server.host_files import HostFileRefused, HostFiles


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("host secret")
    return root


def _refused(act, reason: str) -> None:
    with pytest.raises(HostFileRefused) as info:
        act()
    assert info.value.reason == reason, info.value


def test_writes_and_reads_stay_inside_and_take_the_folders_owner(ws: Path) -> None:
    files = HostFiles(ws, denied=["/workspace/reference_executable"])
    files.write("src/main.c", b"int main(){}", 0o4755)
    path = ws / "src" / "main.c"
    assert path.read_bytes() == b"int main(){}"
    assert path.stat().st_mode & 0o7777 == 0o755  # no setuid bit from a plan
    assert (path.stat().st_uid, path.stat().st_gid) == (ws.stat().st_uid, ws.stat().st_gid)
    assert files.read("src/main.c") == b"int main(){}"
    _refused(lambda: files.read("reference_executable"), "protected_artifact")
    _refused(lambda: files.write("/etc/x", b"", 0o644), "bad_path")
    _refused(lambda: files.read("../outside/secret"), "bad_path")


def test_planted_links_and_special_files_are_never_followed(ws: Path) -> None:
    outside = ws.parent / "outside"
    os.symlink(outside / "secret", ws / "file_link")
    os.symlink(outside, ws / "dir_link")
    os.mkfifo(ws / "fifo")
    files = HostFiles(ws)
    _refused(lambda: files.read("file_link"), "symlink")
    _refused(lambda: files.write("file_link", b"pwned", 0o644), "symlink")
    _refused(lambda: files.read("dir_link/secret"), "symlink")
    _refused(lambda: files.write("dir_link/planted", b"pwned", 0o644), "symlink")
    _refused(lambda: files.read("fifo"), "not_a_file")
    assert (outside / "secret").read_text() == "host secret"
    assert not (outside / "planted").exists()
