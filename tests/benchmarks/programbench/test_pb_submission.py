"""Packing a workspace into submission.tar.gz: what goes in, what stays out, stable bytes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from benchmarks.programbench.submission import (
    CACHEDIR_SIGNATURE,
    SubmissionInfo,
    build_submission,
    list_submission,
)
from harness.sandbox.transfer import CopyLimits, CopyTooLarge, TooManyFiles


def _write(root: Path, rel: str, text: str = "x", mode: int = 0o644) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def _pack(ws: Path, tmp: Path, **kw: object) -> tuple[SubmissionInfo, list[str]]:
    info = build_submission(ws, tmp / "out" / "submission.tar.gz", **kw)  # type: ignore[arg-type]
    return info, list_submission(Path(info.path))


def test_exclusions_and_what_is_kept(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    _write(ws, "compile.sh", "#!/bin/bash\nmake\n", 0o755)
    _write(ws, "executable", "built")
    _write(ws, "reference_executable", "secret")
    _write(ws, "src/executable", "a source file that happens to have this name")
    for junk in (
        ".git/config",
        ".ouroboros/state.json",
        "src/__pycache__/m.cpython-311.pyc",
        ".pytest_cache/v",
        ".ruff_cache/x",
        ".mypy_cache/x",
        "web/node_modules/pkg/index.js",
        "htmlcov/index.html",
        ".DS_Store",
        "src/.coverage",
        "coverage.xml",
        "tools/gen.pyc",
        "tools/gen.pyo",
    ):
        _write(ws, junk)
    # The seed's weakness: real source under these names must survive.
    for keep in (
        "src/build/mod.rs",
        "pkg/dist/dist.go",
        "tests/data/sample.log",
        "tests/data/input.tmp",
        "server.log",
        "notes/target/README",
    ):
        _write(ws, keep)
    info, names = _pack(ws, tmp_path)
    files = {n for n in names if not n.endswith("/")}
    assert files == {
        "compile.sh",
        "src/executable",
        "src/build/mod.rs",
        "pkg/dist/dist.go",
        "tests/data/sample.log",
        "tests/data/input.tmp",
        "server.log",
        "notes/target/README",
    }
    assert info.file_count == 8 and info.has_compile_sh
    assert "reference_executable" in info.excluded and "executable" in info.excluded
    assert ".git/" in info.excluded and "web/node_modules/" in info.excluded
    assert not any(n.startswith(("./", "/")) for n in names)  # relative, no root entry


def test_top_level_build_dirs_dropped_only_when_git_tracks_nothing_in_them(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    _write(ws, "compile.sh", "cargo build --release\n", 0o755)
    _write(ws, "target/release/app", "binary")
    _write(ws, "dist/bundle.js", "generated")
    _write(ws, "build/gen.h", "tracked header")
    _write(ws, "src/build/mod.rs", "not top-level: kept")
    # what git inside the sandbox answered (benchmarks.programbench.collect.freeze_and_probe)
    info, names = _pack(ws, tmp_path, tracked_build_dirs={"build"})
    assert "build/gen.h" in names and "src/build/mod.rs" in names
    assert not any(n.startswith(("target", "dist")) for n in names)
    assert info.build_dirs_dropped == ["dist", "target"]
    assert info.build_dirs_kept == ["build"]


def test_without_git_top_level_build_dirs_are_kept(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    _write(ws, "build/main.c", "int main(){}")
    info, names = _pack(ws, tmp_path)
    assert "build/main.c" in names and info.build_dirs_kept == ["build"]


def test_cachedir_tagged_folders_are_dropped_at_any_depth(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    _write(ws, "crates/a/src/lib.rs")
    (ws / "crates/a/target").mkdir(parents=True)
    (ws / "crates/a/target/CACHEDIR.TAG").write_bytes(CACHEDIR_SIGNATURE + b"\n# cargo\n")
    _write(ws, "crates/a/target/debug/a", "bin")
    _write(ws, "fake/CACHEDIR.TAG", "not the signature")  # an ordinary file
    _, names = _pack(ws, tmp_path)
    assert "crates/a/src/lib.rs" in names and "fake/CACHEDIR.TAG" in names
    assert not any("target" in n for n in names)


def test_protected_paths_symlinks_modes_and_empty_dirs(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    _write(ws, "run.sh", "#!/bin/sh\n", 0o700)
    _write(ws, "data.txt", "d", 0o600)
    _write(ws, "secret/ref.bin", "ref")
    (ws / "empty").mkdir()
    os.symlink("data.txt", ws / "link.txt")
    info, _ = _pack(ws, tmp_path, protected_paths=["/workspace/secret/ref.bin", "./nothing"])
    with tarfile.open(info.path, "r:gz") as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert "secret/ref.bin" not in members and "secret" in members
    assert members["run.sh"].mode == 0o755 and members["data.txt"].mode == 0o644
    assert members["link.txt"].issym() and members["link.txt"].linkname == "data.txt"
    assert members["empty"].isdir()
    assert {m.uid for m in members.values()} == {0}
    assert {m.mtime for m in members.values()} == {946684800}
    assert info.symlink_count == 1


def test_identical_trees_give_identical_bytes(tmp_path: Path) -> None:
    digests = []
    for n in range(2):
        ws = tmp_path / f"ws{n}"
        # Created in a different order, at a different time, with different permissions.
        names = ["b/2.c", "a.txt", "b/1.c", "compile.sh"]
        for rel in names if n == 0 else reversed(names):
            _write(ws, rel, f"content of {rel}", 0o755 if rel.endswith(".sh") else 0o640 + 4 * n)
        os.utime(ws / "a.txt", (time.time() - 1000 * n,) * 2)
        info = build_submission(ws, tmp_path / f"s{n}.tar.gz")
        digests.append(info.sha256)
    assert digests[0] == digests[1]
    assert list_submission(tmp_path / "s0.tar.gz") == [
        "a.txt",
        "b/",
        "b/1.c",
        "b/2.c",
        "compile.sh",
    ]


def test_empty_workspace_gives_an_empty_archive(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / ".git").mkdir(parents=True)
    _write(ws, "reference_executable", "ref")
    info, names = _pack(ws, tmp_path)
    assert names == [] and info.empty and not info.has_compile_sh
    with tarfile.open(info.path, "r:gz") as tar:  # still a valid gzip tar
        assert tar.getmembers() == []


def test_gnu_tar_unpacks_it_like_eval_does(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    _write(ws, "compile.sh", "#!/bin/bash\n", 0o755)
    _write(ws, "deep/er/x.txt", "x")
    info = build_submission(ws, tmp_path / "s.tar.gz")
    dest = tmp_path / "unpacked"
    dest.mkdir()
    subprocess.run(["tar", "-C", str(dest), "-xzf", info.path], check=True)
    assert (dest / "deep/er/x.txt").read_text() == "x"
    assert os.access(dest / "compile.sh", os.X_OK)


def test_bytes_of_a_protected_artifact_are_dropped_whatever_the_name(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ref = b"\x7fELF the reference program"
    _write(ws, "main.c", "int main(){}")
    (ws / "vendor").mkdir()
    (ws / "vendor" / "ref.bin").write_bytes(ref)
    (ws / "same_size.bin").write_bytes(b"x" * len(ref))  # hashed, kept
    digest = hashlib.sha256(ref).hexdigest()
    info, names = _pack(ws, tmp_path, protected_hashes={digest: len(ref)})
    assert "vendor/ref.bin" not in names and "same_size.bin" in names and "vendor/" in names
    assert info.protected_dropped == ["vendor/ref.bin"]


def test_caps_refuse_and_leave_no_archive(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    for n in range(5):
        _write(ws, f"f{n}.txt", "x" * 1000)
    dest = tmp_path / "out" / "submission.tar.gz"
    dest.parent.mkdir()
    dest.write_bytes(b"an older attempt's archive")
    with pytest.raises(TooManyFiles) as too_many:
        build_submission(ws, dest, limits=CopyLimits(max_bytes=1 << 20, max_files=3))
    assert too_many.value.reason_code == "too_many_files"
    with pytest.raises(CopyTooLarge) as too_big:
        build_submission(ws, dest, limits=CopyLimits(max_bytes=2500, max_files=100))
    assert too_big.value.reason_code == "submission_too_large"
    assert list(dest.parent.iterdir()) == []  # neither a partial nor the older archive


def test_fifo_is_skipped_and_listed(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    _write(ws, "a.txt")
    os.mkfifo(ws / "pipe")
    info, names = _pack(ws, tmp_path)
    assert names == ["a.txt"] and info.skipped_special == ["pipe"]


def test_no_host_program_runs_on_an_exported_workspace() -> None:
    """The packing path never spawns a process (git or other) on agent content."""
    root = Path(__file__).resolve().parents[3] / "benchmarks" / "programbench"
    for name in ("submission.py", "collect.py", "runner.py"):
        text = (root / name).read_text()
        assert "subprocess" not in text and "os.system" not in text, name
        assert "popen" not in text.lower(), name


def test_a_path_no_eval_could_write_is_left_out_and_listed(tmp_path: Path) -> None:
    """Issue 43 review: a tree deep enough that ``/workspace/<path>`` passes PATH_MAX made the
    official eval fail for the harness (``official_eval_error``, a free retry); it is left
    out of the submission, listed, and the rest is packed."""
    from benchmarks.programbench.submission import MAX_PATH_BYTES

    ws = tmp_path / "ws"
    deep = ws.joinpath(*["d" * 250] * 15)
    deep.mkdir(parents=True)
    (deep / ("f" * 60)).write_text("x")
    (ws / "compile.sh").write_text("true\n")
    info = build_submission(ws, tmp_path / "s.tar.gz")
    names = list_submission(tmp_path / "s.tar.gz")
    assert "compile.sh" in [n.removeprefix("./") for n in names]
    assert all(len(n.encode()) <= MAX_PATH_BYTES + 2 for n in names)
    assert any("characters)" in s for s in info.skipped_special), info.skipped_special
