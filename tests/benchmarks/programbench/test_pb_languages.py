"""Issue 45: ``_stats/languages.json``, each packed instance's primary language by the
registry's rule (non-blank lines of recognized sources in ``submission.tar.gz``; headers to
the larger of C and C++; most lines wins, then the name). On the offline fixture's real
submissions (the package's bundled correct and incorrect calculator) and on archives an
adversarial agent could leave."""

from __future__ import annotations

import gzip
import io
import resource
import tarfile
from pathlib import Path

import pytest

from benchmarks.programbench import languages
from benchmarks.programbench.fixture import ensure_fixture
from benchmarks.programbench.languages import (
    language_lines,
    language_of,
    primary_language,
    submission_languages,
)
from benchmarks.programbench.submission import build_submission


def archive(path: Path, files: dict[str, bytes], links: dict[str, str] | None = None) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return path


@pytest.mark.parametrize("which", ["oracle_dir", "incorrect_dir"])
def test_the_fixture_submissions_are_shell(tmp_path: Path, which: str) -> None:
    paths = ensure_fixture(image=False)
    sub = tmp_path / "sub.tar.gz"
    build_submission(Path(getattr(paths, which)), sub)
    counts = language_lines(sub)
    assert set(counts) == {"sh"} and counts["sh"] > 0  # calculator.sh, compile.sh
    assert primary_language(counts) == "sh"


def test_submission_directory_languages(tmp_path: Path) -> None:
    (tmp_path / "a__rust.1").mkdir()
    archive(tmp_path / "a__rust.1" / "submission.tar.gz",
            {"src/main.rs": b"fn main() {\n\n}\n", "build.sh": b"cargo build\n",
             "target/debug/gen.c": b"int x;\n" * 50})  # a build folder: not the solution
    (tmp_path / "b__c.2").mkdir()
    archive(tmp_path / "b__c.2" / "submission.tar.gz",
            {"x.c": b"int main(){}\n", "x.h": b"#pragma once\nint f(void);\n",
             "y.cpp": b"int g(){}\n"})  # headers go to the larger of C and C++: a tie, C wins
    (tmp_path / "c__none.3").mkdir()
    archive(tmp_path / "c__none.3" / "submission.tar.gz", {"README.md": b"# notes\n"})
    (tmp_path / "d__torn.4").mkdir()
    (tmp_path / "d__torn.4" / "submission.tar.gz").write_bytes(b"\x1f\x8b not a tar")
    got = submission_languages(tmp_path, ["d__torn.4", "c__none.3", "b__c.2", "a__rust.1"])
    assert got.root == {"a__rust.1": "rs", "b__c.2": "c", "c__none.3": "unknown",
                        "d__torn.4": "unknown"}
    assert list(got.root) == sorted(got.root)  # the file's keys, sorted


def test_rules_of_the_count() -> None:
    assert language_of("src/lib.RS") == "rs" and language_of("a/B.C") == "cpp"
    assert language_of("node_modules/x.js") is None and language_of("main.js") == "js"
    assert language_of("vendor/x.go") is None and language_of("cmd/vendor.go") == "go"
    assert primary_language({"go": 3, "c": 3}) == "c"  # a tie: the name decides
    assert primary_language({"sh": 0}) == "sh"  # a recognized file counts though blank
    assert primary_language({}) == "unknown"


def test_an_adversarial_archive_is_counted_within_bounds(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Links are not followed, nothing is extracted, and reading stops at the byte budget
    (one huge line, a flood of lines)."""
    monkeypatch.setattr(languages, "MAX_READ_BYTES", 1 << 20)
    path = archive(tmp_path / "s.tar.gz",
                   {"flood.py": b"x = 1\n" * (1 << 20), "huge.rs": b"x" * (4 << 20),
                    "small.go": b"package main\n"},
                   links={"etc.go": "/etc/passwd", "up.go": "../../outside.go"})
    counts = language_lines(path)
    assert counts.get("py", 0) <= (1 << 20) // 6 + 1 and counts.get("rs", 0) == 0
    assert "go" not in counts or counts["go"] <= 1  # the links count nothing
    assert not (tmp_path / "flood.py").exists() and not list(tmp_path.glob("*.rs"))


def _folder(tmp_path: Path, name: str) -> Path:
    (tmp_path / name).mkdir()
    return tmp_path / name / "submission.tar.gz"


def test_archives_that_break_the_reader_are_unknown_and_never_escape(tmp_path: Path) -> None:
    """Found by the attack review: a sparse map of garbage made tarfile raise ValueError and
    a corrupt xz stream LZMAError, out of submission_languages; now each archive is read in
    a child and any failure there is ``unknown``."""
    sparse = tarfile.TarInfo("a.c")
    sparse.size = 4
    sparse.pax_headers = {"GNU.sparse.map": "x,y,z", "GNU.sparse.size": "9"}
    with tarfile.open(_folder(tmp_path, "sparse"), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(sparse, io.BytesIO(b"int\n"))
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:xz") as tar:
        for n in range(40):
            info = tarfile.TarInfo(f"f{n}.c")
            payload = bytes(range(256)) * 64
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    raw = bytearray(data.getvalue())
    raw[len(raw) // 2:len(raw) // 2 + 64] = b"\xff" * 64  # corrupt mid-stream
    _folder(tmp_path, "xz").write_bytes(bytes(raw))
    got = submission_languages(tmp_path, ["sparse", "xz"])
    assert got.root == {"sparse": "unknown", "xz": "unknown"}


def test_a_one_gib_header_is_read_within_the_childs_memory(tmp_path: Path) -> None:
    """A 1 MiB archive whose one GNU long-name header is 1 GiB (tarfile reads it whole): the
    child's address space is bounded, so the count fails there (``unknown``) instead of
    taking the host's memory."""
    size = 1 << 30
    header = tarfile.TarInfo("././@LongLink")
    header.type, header.size = tarfile.GNUTYPE_LONGNAME, size
    with _folder(tmp_path, "bomb").open("wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb",
                                                                    mtime=0) as gz:
        gz.write(header.tobuf(format=tarfile.USTAR_FORMAT))
        block = b"a" * (1 << 24)
        for _ in range(size // len(block)):
            gz.write(block)
        gz.write(bytes(1024))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert submission_languages(tmp_path, ["bomb"]).root == {"bomb": "unknown"}
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 << 10  # KiB
