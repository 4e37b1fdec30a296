"""Agent-written files are read only as bounded regular files, never through links."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.core.untrusted import (
    UntrustedFileError,
    hash_untrusted_file,
    is_regular_file,
    read_untrusted_bytes,
)


def test_regular_file_is_read_within_its_cap(tmp_path: Path) -> None:
    target = tmp_path / "a"
    target.write_bytes(b"x" * 10)
    assert read_untrusted_bytes(target) == b"x" * 10
    with pytest.raises(UntrustedFileError, match="over the 9 cap"):
        read_untrusted_bytes(target, 9)
    assert is_regular_file(target)


@pytest.mark.parametrize("kind", ["link_to_etc", "link_to_dev_zero", "fifo", "directory"])
def test_links_and_special_files_are_refused(tmp_path: Path, kind: str) -> None:
    path = tmp_path / kind
    if kind == "link_to_etc":
        path.symlink_to("/etc/passwd")
    elif kind == "link_to_dev_zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)  # a blocking open would hang here forever
    else:
        path.mkdir()
    with pytest.raises(OSError):
        read_untrusted_bytes(path)
    with pytest.raises(OSError):
        hash_untrusted_file(path)
    assert not is_regular_file(path)
