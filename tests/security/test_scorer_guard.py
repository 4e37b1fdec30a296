"""The scorer guard on real archives: what would steer ``programbench eval``'s pytest is cut
out of a ``submission.tar.gz``, what a build needs stays."""

from __future__ import annotations

import io
import tarfile
import tomllib
from pathlib import Path

import pytest

from benchmarks.programbench.scorer_guard import (
    REPORT_NAME,
    GuardError,
    guard_submission,
    read_report,
)

SETUP_CFG = """[metadata]
name = calc

[tool:pytest]
addopts = -p evil

[options]
packages = find:
"""
PYPROJECT = """[project]
name = "calc"
version = "1.0"

[tool.pytest.ini_options]
addopts = "-p evil"

[tool.ruff]
line-length = 100
"""


def make_tar(path: Path, entries: list[tuple[str, bytes | None, str | None]]) -> Path:
    """entries: (name, data for a file / None for a dir, symlink target or 'hard:<name>')."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data, link in entries:
            info = tarfile.TarInfo(name)
            if link is not None and link.startswith("hard:"):
                info.type, info.linkname = tarfile.LNKTYPE, link[5:]
                tar.addfile(info)
            elif link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tar.addfile(info)
            elif data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o755
                tar.addfile(info, io.BytesIO(data))
    return path


def members(path: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(path) as tar:
        return {m.name: m for m in tar.getmembers()}


def read(path: Path, name: str) -> str:
    with tarfile.open(path) as tar:
        fh = tar.extractfile(name)
        assert fh is not None
        return fh.read().decode()


def test_pytest_overrides_removed_sources_and_deep_scaffolding_kept(tmp_path: Path) -> None:
    sub = make_tar(tmp_path / "submission.tar.gz", [
        ("compile.sh", b"#!/bin/sh\n", None),
        ("conftest.py", b"raise SystemExit\n", None),
        ("./tox.ini", b"[pytest]\n", None),
        ("pytest.ini", b"[pytest]\n", None),
        (".pytest.ini", b"", None),
        ("pytest.toml", b"", None),
        ("eval", None, None),
        ("eval/tests/conftest.py", b"x", None),
        ("eval/results.xml", b"<testsuites/>", None),
        ("subprocess.py", b"fake", None),
        ("_pytest", None, None),
        ("_pytest/__init__.py", b"fake", None),
        ("_pytest/helpers.py", b"kept: no longer a package", None),
        ("calculator.py", b"print(42)\n", None),
        ("src/conftest.py", b"deep conftest is not on pytest's path", None),
        ("tests/test_x.py", b"def test_x(): pass\n", None),
        ("tests/conftest.py", b"", None),
        ("setup.cfg", SETUP_CFG.encode(), None),
        ("pyproject.toml", PYPROJECT.encode(), None),
    ])
    report = guard_submission(sub)
    names = set(members(sub))
    assert names == {"compile.sh", "_pytest", "_pytest/helpers.py", "calculator.py", "src/conftest.py",
                     "tests/test_x.py", "tests/conftest.py", "setup.cfg", "pyproject.toml"}
    reasons = {r.name: r.reason for r in report.removed}
    assert reasons == {
        "conftest.py": "pytest_config", "./tox.ini": "pytest_config",
        "pytest.ini": "pytest_config", ".pytest.ini": "pytest_config",
        "pytest.toml": "pytest_config", "eval": "reserved_eval_dir",
        "eval/tests/conftest.py": "reserved_eval_dir", "eval/results.xml": "reserved_eval_dir",
        "subprocess.py": "shadows_module", "_pytest/__init__.py": "shadows_module"}
    assert sorted(report.rewritten) == ["pyproject.toml", "setup.cfg"]
    cfg = read(sub, "setup.cfg")
    assert "tool:pytest" not in cfg and "-p evil" not in cfg and "packages = find:" in cfg
    data = tomllib.loads(read(sub, "pyproject.toml"))
    assert "pytest" not in data["tool"] and data["tool"]["ruff"]["line-length"] == 100
    assert data["project"]["name"] == "calc"
    on_disk = read_report(tmp_path)
    assert on_disk is not None and on_disk.removed_names == report.removed_names
    # idempotent: a second pass finds nothing and keeps the file byte for byte
    before = sub.read_bytes()
    again = guard_submission(sub)
    assert again == report and sub.read_bytes() == before


def test_links_cannot_carry_an_override_in(tmp_path: Path) -> None:
    sub = make_tar(tmp_path / "submission.tar.gz", [
        ("here", None, "."),                       # here/conftest.py would land at the root
        ("here/conftest.py", b"x", None),
        ("cfg", None, None),
        ("cfg/pytest-section.cfg", b"[tool:pytest]\naddopts=-p evil\n", None),
        ("setup.cfg", None, "cfg/pytest-section.cfg"),
        ("conftest.py", b"x", None),
        ("lib.py", None, "hard:conftest.py"),      # would fail the container's tar
        ("../escape.py", b"x", None),
        ("/abs.py", b"x", None),
        ("ok.txt", b"fine", None),
    ])
    report = guard_submission(sub)
    assert set(members(sub)) == {"here", "cfg", "cfg/pytest-section.cfg", "ok.txt"}
    assert {r.name: r.reason for r in report.removed} == {
        "here/conftest.py": "below_symlink", "setup.cfg": "pytest_config_unstrippable",
        "conftest.py": "pytest_config", "lib.py": "link_to_removed",
        "../escape.py": "unsafe_path", "/abs.py": "unsafe_path"}


@pytest.mark.parametrize("name,text", [
    ("setup.cfg", "[metadata\nname = x\n"),                          # pytest cannot parse it
    ("setup.cfg", "[pytest]\naddopts = -x\n"),                        # section only, empty
    ("pyproject.toml", 'tool.pytest.ini_options.addopts = "-p evil"\n'),  # dotted key
    ("pyproject.toml", "[project\n"),                                   # invalid TOML
])
def test_configs_that_would_still_reach_pytest_are_removed(tmp_path: Path, name: str,
                                                           text: str) -> None:
    sub = make_tar(tmp_path / "submission.tar.gz", [(name, text.encode(), None),
                                                    ("main.c", b"int main(){}", None)])
    report = guard_submission(sub)
    if name == "setup.cfg" and text.startswith("[pytest]"):
        assert read(sub, name) == "" and report.rewritten == [name]  # emptied, still valid
    else:
        assert set(members(sub)) == {"main.c"}
        assert [(r.name, r.reason) for r in report.removed] == [
            (name, "pytest_config_unstrippable")]


def test_an_unreadable_archive_is_an_error_and_left_in_place(tmp_path: Path) -> None:
    sub = tmp_path / "submission.tar.gz"
    sub.write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(GuardError, match="cannot be read"):
        guard_submission(sub)
    assert sub.read_bytes() == b"\x1f\x8b\x08\x00garbage"
    assert not (tmp_path / REPORT_NAME).exists()
    assert [p.name for p in tmp_path.iterdir()] == ["submission.tar.gz"]
