"""The build check's host-side listing of the eval container's upper layer, attacked the way
an adversarial ``compile.sh`` would: links pointing at host paths, more entries than the cap,
odd names, a directory the check cares about swapped for a link, whiteouts.

The upper layer is written by the submission's build, so it is untrusted input read by the
host (DESIGN.md section 8, boundary 1 and 2): names and ``lstat`` only, nothing followed,
bounded, and any doubt ends in a refusal or the ``docker diff`` fallback, never "clean".
Most tests call :mod:`benchmarks.programbench.layer_changes` on a tree shaped like an overlay
upper/lower pair in ``tmp_path``; the ``docker`` one goes through the real eval.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.programbench import layer_changes
from benchmarks.programbench.docker_policy import (
    DIFF_MALFORMED,
    MAX_DIFF_CHECKED,
    TAMPER_SCOPE,
    _log,
    _steers,
    build_changes,
    build_tampering,
)
from benchmarks.programbench.layer_changes import Unavailable, changes

SECRET = "HOST_SECRET_NAME"
# The clean-room image's Python folders, as container paths (committed data, relative to the
# container's root: tests/data/scorer/README.md)
LAYOUT = json.loads((Path(__file__).resolve().parents[1] / "data" / "scorer"
                     / "cleanroom_layout.json").read_text())
SITE = "/" + LAYOUT["site"]  # /usr/local's dist-packages: on sys.path ahead of Debian's
DIST = "/" + LAYOUT["dist"]
STDLIB = "/" + LAYOUT["stdlib"]
USER_SITE = "/" + LAYOUT["user_site"]
STDLIB_ZIP = "/" + LAYOUT["stdlib_zip"]
ROOT_HOME = "/" + LAYOUT["root_home"]  # the image's root user's home

# Every directory listing and file open of this process while a check runs (audit events):
# the check may list folders of the layer only, and open nothing.
_AUDIT: list[tuple[str, Any]] = []
_AUDITING = [False]


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if _AUDITING[0] and event in ("os.scandir", "os.listdir", "open"):
        _AUDIT.append((event, args[0] if args else None))


sys.addaudithook(_hook)


class Image:
    """An overlay ``lower`` (the clean-room image) and an ``upper`` (what the build wrote),
    plus a ``host`` folder outside the layer that nothing may reach."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "layer"
        self.upper, self.lower = self.root / "upper", self.root / "lower"
        self.host = tmp_path / "host"
        self.host.mkdir()
        (self.host / f"{SECRET}.pth").write_text("import os\n")
        (self.host / "shadow").write_text("root:$6$secret:...\n")
        for rel in LAYOUT["lower_folders"]:
            (self.lower / rel).mkdir(parents=True, exist_ok=True)
        for rel in LAYOUT["lower_files"]:
            (self.lower / rel).write_text("x\n")
        self.upper.mkdir()

    def at(self, rel: str) -> Path:
        """``rel`` (a container path) in the upper layer, its parents created (a copy-up)."""
        path = self.upper / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def changes(self) -> list[tuple[str, str]]:
        _AUDIT.clear()
        _AUDITING[0] = True
        try:
            return changes(str(self.upper), [str(self.lower)], TAMPER_SCOPE)
        finally:
            _AUDITING[0] = False

    def reads_outside(self) -> list[tuple[str, Any]]:
        """Audited listings that left the layer, and every open (the check opens nothing)."""
        root = os.path.realpath(self.root)
        bad = []
        for event, arg in _AUDIT:
            if event == "open":
                bad.append((event, arg))
            elif isinstance(arg, str | bytes):
                real = os.path.realpath(os.fsdecode(arg))
                if real != root and not real.startswith(root + os.sep):
                    bad.append((event, real))
        return bad


def steering(found: list[tuple[str, str]]) -> list[str]:
    return [path for kind, path in found if _steers(kind, path) is True]


@pytest.fixture
def image(tmp_path: Path) -> Image:
    return Image(tmp_path)


# (1) links to host paths -------------------------------------------------------------------

def test_links_to_host_paths_are_reported_never_followed(image: Image) -> None:
    image.at(f"{SITE}/zz_evil.pth").symlink_to(image.host / "shadow")
    image.at(f"{SITE}/root_link").symlink_to(image.root.anchor)
    image.at(f"{DIST}/host_dir").symlink_to(image.host)
    image.at(f"{DIST}/up.pth").symlink_to("../../../../../../host/shadow")
    image.at("/etc/profile.d/zz.sh").symlink_to(image.host / "shadow")
    image.at(f"{ROOT_HOME}/.bashrc").symlink_to(image.host / "shadow")  # replaces the image's .bashrc
    found = image.changes()
    assert image.reads_outside() == []
    # each link is one change, nothing below it was listed
    assert ("A", f"{SITE}/zz_evil.pth") in found and ("A", f"{SITE}/root_link") in found
    assert ("A", f"{DIST}/host_dir") in found and ("A", f"{DIST}/up.pth") in found
    assert ("A", "/etc/profile.d/zz.sh") in found and ("C", f"{ROOT_HOME}/.bashrc") in found
    assert not any(SECRET in p or p.startswith((f"{SITE}/root_link/", f"{DIST}/host_dir/"))
                   for _, p in found), found
    flagged = steering(found)
    for path in (f"{SITE}/zz_evil.pth", f"{DIST}/up.pth", "/etc/profile.d/zz.sh",
                 f"{ROOT_HOME}/.bashrc"):
        assert path in flagged, (path, found)


@pytest.mark.xfail(strict=True, reason=(
    "layer_changes.py (changes): `os.scandir(upper + rel)` opens each folder by its "
    "full path, so a link swapped in for a scope folder after its parent was listed (by a "
    "compile.sh process still running) would be followed and a host folder listed (names, "
    "up to MAX_ENTRIES, reported as changes). The eval's path never lets that happen: the "
    "container is paused from before the listing until its commit is made "
    "(layer_changes.paused, docker_policy._commit; "
    "test_the_container_is_paused_while_its_layer_is_listed, "
    "test_a_process_left_running_cannot_write_between_the_check_and_the_commit), so no "
    "process of it runs while its layer is read. This in-process simulation calls changes() "
    "on a layer it swaps itself, inside the os.scandir it patches: it cannot pass with "
    "either fix (a walk by fd never calls os.scandir with the path, and os.open of each "
    "folder trips this file's 'opens nothing' audit)."))
def test_a_folder_swapped_for_a_link_during_the_walk_is_not_followed(
        image: Image, monkeypatch: pytest.MonkeyPatch) -> None:
    # compile.sh's background processes are still running when the check runs (the eval
    # kills leftovers only after a timeout, programbench/container.py): one swaps a scope
    # folder for a link to a host folder between its lstat and its listing
    image.at(f"{DIST}/new.py").write_text("x\n")
    target = str(image.upper / DIST.lstrip("/"))
    real_scandir = os.scandir
    swapped = [False]

    def racing_scandir(path: Any = ".") -> Any:
        if path == target and not swapped[0]:
            swapped[0] = True
            os.rename(target, target + ".away")
            os.symlink(image.host, target)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", racing_scandir)
    try:
        found = image.changes()
    except Unavailable:
        found = []  # a walk that notices the swap and gives up is safe too
    assert swapped[0]
    assert image.reads_outside() == [], "the host listed a folder outside the layer"
    assert not any(SECRET in p for _, p in found), found


def test_the_container_is_paused_while_its_layer_is_listed(
        tmp_path: Path, image: Image, monkeypatch: pytest.MonkeyPatch) -> None:
    # what closes the swap above on the eval's path: no process of the build runs while the
    # layer is listed, and the container is unpaused whatever the listing ends with
    image.at(f"{SITE}/zz_evil.pth").write_text("")
    calls = tmp_path / "calls"
    calls.write_text("")
    docker = fake_docker(tmp_path, image, b"")
    script = Path(docker)
    script.write_text(script.read_text().replace(
        "case", f"echo \"$1\" >> '{calls}'\ncase", 1))
    during: list[list[str]] = []
    real_scandir = os.scandir

    def listing(path: Any = ".") -> Any:
        during.append(calls.read_text().split())
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", listing)
    found = layer_changes.container_changes(docker, "c", TAMPER_SCOPE)
    assert f"{SITE}/zz_evil.pth" in steering(found)
    assert during and all("pause" in c and "unpause" not in c for c in during), during
    assert calls.read_text().split()[-1] == "unpause"
    # a listing that gives up (the cap) still unpauses
    calls.write_text("")
    monkeypatch.setattr(layer_changes, "MAX_ENTRIES", 1)
    with pytest.raises(Unavailable):
        layer_changes.container_changes(docker, "c", TAMPER_SCOPE)
    assert calls.read_text().split()[-1] == "unpause"
    # a container that cannot be paused is not listed: the caller asks docker diff
    calls.write_text("")
    during.clear()
    script.write_text(script.read_text().replace("case \"$1\" in\n",
                                                 "case \"$1\" in\n  pause) exit 1 ;;\n", 1))
    with pytest.raises(Unavailable, match="pause"):
        layer_changes.container_changes(docker, "c", TAMPER_SCOPE)
    assert during == [] and "unpause" not in calls.read_text().split()


# (2) more entries than the cap ---------------------------------------------------------------

def test_more_entries_than_the_cap_is_unavailable_never_clean(
        image: Image, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layer_changes, "MAX_ENTRIES", 300)
    # spread over many folders of the scope, each under the cap alone
    for i in range(40):
        folder = image.at(f"{SITE}/pkg{i:02d}/x")
        folder.mkdir()
        for j in range(8):
            (folder / f"m{j}.py").write_text("")
    image.at(f"{SITE}/zz_evil.pth").write_text("import os\n")
    with pytest.raises(Unavailable, match="entries"):
        image.changes()
    # just under the cap it is listed, the .pth flagged (the cap is what decided above)
    monkeypatch.setattr(layer_changes, "MAX_ENTRIES", 10_000)
    assert f"{SITE}/zz_evil.pth" in steering(image.changes())


def test_many_entries_outside_the_scope_cost_nothing(
        image: Image, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layer_changes, "MAX_ENTRIES", 100)
    junk = image.at("/opt/junk/x").parent
    for i in range(2000):
        (junk / f"f{i}").write_text("")
    image.at(f"{SITE}/zz_evil.pth").write_text("")
    started = time.monotonic()
    found = image.changes()  # /opt is not on the way to the scope: never listed
    assert time.monotonic() - started < 5
    assert not any(p.startswith("/opt") for _, p in found)
    assert f"{SITE}/zz_evil.pth" in steering(found)


def test_a_path_longer_than_the_host_allows_falls_back_to_docker_diff(
        tmp_path: Path, image: Image) -> None:
    # a deep tree of long names: short enough inside the container, too long on the host
    fd = os.open(image.at(f"{SITE}/pkg/x").parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(20):
            name = "d" * 250
            os.mkdir(name, dir_fd=fd)
            new = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = new
        os.close(os.open("zz_evil.pth", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    finally:
        os.close(fd)
    # the listing gives up (an OSError of lstat, which build_changes catches like
    # Unavailable): the check asks docker diff, it does not crash or report a partial list
    with pytest.raises((Unavailable, OSError)):
        image.changes()
    docker = fake_docker(tmp_path, image, f"A {SITE}/pkg/zz_evil.pth\n".encode())
    assert build_changes(docker, "c") == ([("A", f"{SITE}/pkg/zz_evil.pth")], "docker_diff")


class _Counting:
    def __init__(self, inner: Any, pulled: list[int]) -> None:
        self.inner, self.pulled = inner, pulled

    def __enter__(self) -> _Counting:
        return self

    def __exit__(self, *exc: object) -> None:
        self.inner.close()

    def __iter__(self) -> Iterator[os.DirEntry[str]]:
        return self

    def __next__(self) -> os.DirEntry[str]:
        entry: os.DirEntry[str] = next(self.inner)
        self.pulled[0] += 1
        return entry


def test_the_cap_bounds_what_is_read_of_one_huge_folder(
        image: Image, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layer_changes, "MAX_ENTRIES", 100)
    folder = image.at(f"{SITE}/x").parent
    for i in range(3000):
        (folder / f"m{i}.py").write_text("")
    pulled = [0]
    real_scandir = os.scandir
    monkeypatch.setattr(os, "scandir",
                        lambda path=".": _Counting(real_scandir(path), pulled))
    with pytest.raises(Unavailable):
        image.changes()
    assert pulled[0] <= 101 + 50, f"{pulled[0]} entries read with a cap of 100"


# the fallback the cap (or a too-long path) forces: `docker diff` --------------------------

def fake_docker(tmp_path: Path, image: Image, diff: bytes) -> str:
    """A ``docker`` whose ``inspect`` names ``image``'s folders, whose ``diff`` prints ``diff``
    and whose ``exec`` prints nothing (the in-container checks find nothing)."""
    info = {"Name": "fuse-overlayfs",
            "Data": {"UpperDir": str(image.upper), "LowerDir": str(image.lower)}}
    (tmp_path / "inspect.json").write_text(json.dumps(info))
    (tmp_path / "diff.txt").write_bytes(diff)
    script = tmp_path / "docker"
    script.write_text("#!/bin/sh\ncase \"$1\" in\n"
                      f"  inspect) cat '{tmp_path}/inspect.json' ;;\n"
                      f"  diff) cat '{tmp_path}/diff.txt' ;;\n"
                      "  *) exit 0 ;;\nesac\n")
    script.chmod(0o755)
    return str(script)


def test_the_fallback_flags_a_planted_pth(tmp_path: Path, image: Image,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # control for the two below: the cap forces the fallback, whose short diff is checked
    monkeypatch.setattr(layer_changes, "MAX_ENTRIES", 5)
    for i in range(10):
        image.at(f"/junk{i}").write_text("")
    docker = fake_docker(tmp_path, image,
                         f"C {SITE}\nA {SITE}/zz_evil.pth\nA /junk0\n".encode())
    assert build_tampering(docker, "c") == [f"{SITE}/zz_evil.pth"]


def test_the_fallback_does_not_truncate_a_planted_pth_away(
        tmp_path: Path, image: Image, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layer_changes, "MAX_ENTRIES", 5)
    for i in range(10):
        image.at(f"/junk{i}").write_text("")
    junk = "".join(f"A /aaa/junk{i:05d}\n" for i in range(MAX_DIFF_CHECKED))
    docker = fake_docker(tmp_path, image, (junk + f"A {SITE}/zz_evil.pth\n").encode())
    assert build_tampering(docker, "c") != []


def test_the_fallback_is_not_misled_by_a_newline_in_a_name(
        tmp_path: Path, image: Image, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layer_changes, "MAX_ENTRIES", 5)
    for i in range(10):
        image.at(f"/junk{i}").write_text("")
    docker = fake_docker(tmp_path, image, f"C {SITE}\nA {SITE}/evil\n.pth\n".encode())
    assert build_tampering(docker, "c") != []


# (3) odd names ------------------------------------------------------------------------------

def test_odd_names_are_reported_verbatim_and_flagged(tmp_path: Path, image: Image) -> None:
    site = image.at(f"{SITE}/x").parent
    newline = "evil\n.pth"
    looks_like_a_line = "ok\nA .pth"  # a docker-diff-looking name: a module dir
    long_name = "l" * 251 + ".pth"  # 255 bytes, the longest name
    raw = b"\xff\xfe\n.pth"  # not UTF-8
    for name in (newline, long_name, "sitecustomize.py"):
        (site / name).write_text("import os\n")
    (site / looks_like_a_line).mkdir()
    (site / looks_like_a_line / "__init__.py").write_text("")
    os.close(os.open(os.fsencode(site) + b"/" + raw, os.O_CREAT | os.O_WRONLY))
    (image.at(f"{DIST}/ok.py")).write_text("changed\n")  # a changed module of the image
    found = image.changes()
    assert image.reads_outside() == []
    expected = {f"{SITE}/{n}" for n in (newline, long_name, "sitecustomize.py")}
    expected.add(f"{SITE}/{os.fsdecode(raw)}")
    assert expected <= set(steering(found)), found
    assert ("C", f"{DIST}/ok.py") in found and _steers("C", f"{DIST}/ok.py") is None
    assert ("A", f"{SITE}/{looks_like_a_line}/__init__.py") in found
    assert not any(p.endswith(("/evil", "/ok")) or p == ".pth" for _, p in found), found
    # the refusal's evidence is written without a crash, names intact
    log = tmp_path / "policy.jsonl"
    _log(str(log), {"op": "commit", "refused": ", ".join(sorted(expected))})
    refused = json.loads(log.read_text())["refused"]
    assert newline in refused and os.fsdecode(raw) in refused


# (4) a folder the check cares about replaced by a link -------------------------------------

def test_a_site_folder_replaced_by_a_link_is_flagged(image: Image) -> None:
    image.at(DIST).symlink_to(image.host / "evil_site")
    found = image.changes()
    assert ("C", DIST) in found and ("D", f"{DIST}/ok.py") in found
    assert f"{DIST}/ok.py" in steering(found)


def test_a_python_folder_replaced_by_a_link_is_flagged(image: Image) -> None:
    image.at(STDLIB).symlink_to(image.host)
    found = image.changes()
    assert image.reads_outside() == []
    assert f"{STDLIB}/os.py" in steering(found)
    assert not any(SECRET in p for _, p in found)


def test_an_empty_site_folder_replaced_by_a_link_is_flagged(image: Image) -> None:
    image.at(SITE).symlink_to(image.host / "x")
    found = image.changes()
    # what the listing reports (right today): the link as changed, nothing below it
    assert ("C", SITE) in found and not any(p.startswith(SITE + "/") for _, p in found)
    assert steering(found) != []


def test_a_link_on_the_way_to_the_user_site_is_flagged(image: Image) -> None:
    image.at(f"{ROOT_HOME}/.local").symlink_to(image.host / "x")
    found = image.changes()
    assert steering(found) != [], found


# whiteouts and opaque folders -----------------------------------------------------------------

@pytest.mark.skipif(os.geteuid() != 0, reason="a 0:0 character device needs root")
def test_whiteouts_of_python_files_are_flagged(image: Image) -> None:
    os.mknod(image.at(f"{DIST}/ok.py"), stat.S_IFCHR | 0o600, os.makedev(0, 0))
    image.at(f"{ROOT_HOME}/.wh..profile").write_text("")  # an aufs-style whiteout name
    found = image.changes()
    assert ("D", f"{DIST}/ok.py") in found and ("D", f"{ROOT_HOME}/.profile") in found
    assert {f"{DIST}/ok.py", f"{ROOT_HOME}/.profile"} <= set(steering(found))


def test_an_opaque_python_folder_deletes_what_was_below(image: Image) -> None:
    folder = image.at(f"{DIST}/new.py").parent
    (folder / "new.py").write_text("")
    try:
        os.setxattr(folder, "trusted.overlay.opaque", b"y")
    except OSError:  # no trusted xattrs here (not root, tmpfs...): the marker file
        (folder / ".wh..wh..opq").write_text("")
    found = image.changes()
    assert ("D", f"{DIST}/ok.py") in found and ("A", f"{DIST}/new.py") in found
    assert f"{DIST}/ok.py" in steering(found)
    assert not any(p.endswith(".opq") for _, p in found)


# the reported gap: an interpreter planted ahead of the image's on PATH -------------------------

def test_the_listing_reports_a_planted_interpreter(image: Image) -> None:
    image.at("/usr/local/bin/python3").write_text("#!/bin/sh\nexit 0\n")
    assert ("A", "/usr/local/bin/python3") in image.changes()


def test_an_added_python3_ahead_on_path_is_flagged(image: Image) -> None:
    image.at("/usr/local/bin/python3").write_text("#!/bin/sh\necho '1 passed'\n")
    assert "/usr/local/bin/python3" in steering(image.changes())


def test_an_added_python3_in_usr_local_sbin_is_flagged(image: Image) -> None:
    image.at("/usr/local/sbin/python3").write_text("#!/bin/sh\necho '1 passed'\n")
    assert "/usr/local/sbin/python3" in steering(image.changes())


# through the real eval ---------------------------------------------------------------------

def _eval_with_build(tmp_path: Path, plant: str) -> tuple[dict[str, Any], str, str]:
    """``(row, refused, output)`` of the fixture run whose ``compile.sh`` ends with ``plant``."""
    from tests.security.scorer_support import (
        PRINT_42_COMPILE,
        TARGET,
        agent_command,
        fixture_row,
    )
    from tests.support.suite import run_pytest

    run = run_pytest(TARGET, tmp_path / "run", "--pb-fixtures", "-k", "calculator",
                     "--agent", "command",
                     "--agent-command", agent_command({"compile.sh": PRINT_42_COMPILE + plant}))
    row: dict[str, Any] = fixture_row(run)
    evidence = (run.root / row["output_paths"]["submission"]).parent / "official_eval.json"
    refused = ""
    if evidence.exists():
        refused = " ".join(json.loads(evidence.read_text())["docker_policy"]["refused"])
    return row, refused, run.out


@pytest.mark.docker
def test_a_build_planting_linked_and_newline_named_pth_files_gains_nothing(tmp_path: Path) -> None:
    plant = (
        f"D={SITE}\nmkdir -p $D\n"
        "ln -s /etc/shadow $D/zz_link.pth\n"
        "ln -s / $D/zz_root\n"
        "printf 'import os\\n' > \"$D/$(printf 'zz\\nnl.pth')\"\n"
    )
    row, refused, out = _eval_with_build(tmp_path, plant)
    # issue 40: the build runs as the program user, so the kernel refuses each write into
    # Python's folders (EPERM): compile.sh fails on them and is refused by name (never
    # scored); nothing is left for the build check to refuse. The listing of such names
    # from a layer is tested on trees above.
    assert (row["outcome"], row["reason_code"]) == ("agent_failed", "build_needs_root"), out
    assert row["score"] is None and row["infra"] is False
    assert refused == "", refused


@pytest.mark.docker
def test_a_build_planting_a_non_utf8_named_pth_gains_nothing(tmp_path: Path) -> None:
    plant = f"D={SITE}\nmkdir -p $D\nprintf 'import os\\n' > \"$D/$(printf 'zz\\377.pth')\"\n"
    row, refused, out = _eval_with_build(tmp_path, plant)
    # the write fails (EPERM, issue 40); bash's message names the file, byte 0xff and all,
    # and the official CLI cannot decode the build's output: the agent's failure, score 0
    assert row["infra"] is False, out
    assert row["reason_code"] == "build_needs_root" or row["details"]["eval"]["error_code"] == (
        "UnicodeDecodeError"), row
    assert refused == "", refused


# issue 29: a process the build left running, a module ahead of pytest's, the fallback's names

def test_a_module_ahead_of_one_the_scorer_imports_is_flagged(image: Image) -> None:
    # Debian's sys.path: the standard library, the user site, /usr/local's dist-packages, then
    # /usr/lib/python3/dist-packages, where the clean room's pytest and pluggy are
    for rel in (f"{SITE}/pluggy.py", f"{SITE}/iniconfig/__init__.py",
                f"{SITE}/exceptiongroup.cpython-311-x86_64-linux-gnu.so",
                f"{USER_SITE}/packaging/__init__.py",
                f"{STDLIB}/pluggy.py", f"{STDLIB}/lib-dynload/zipp.so"):
        image.at(rel).write_text("x\n")
    image.at(STDLIB_ZIP).write_text("PK")  # a zip ahead of the standard library
    # the image's own dist-packages module (not in the static list): named from its layers
    image.at(f"{DIST}/x").parent.mkdir(parents=True, exist_ok=True)
    (image.lower / DIST.lstrip("/") / "corp_plugin").mkdir()
    image.at(f"{SITE}/corp_plugin/__init__.py").write_text("x\n")
    # what an honest `pip install .` of the program adds there is not flagged
    image.at(f"{SITE}/calculator_tool/__init__.py").write_text("x\n")
    image.at(f"{SITE}/calculator_tool-1.0.dist-info/METADATA").write_text("x\n")
    from benchmarks.programbench.docker_policy import check_build

    flagged, source = check_build("docker", "c", (str(image.upper), [str(image.lower)]))
    assert source == "layer"
    for path in (f"{SITE}/pluggy.py", f"{SITE}/iniconfig",
                 f"{SITE}/exceptiongroup.cpython-311-x86_64-linux-gnu.so",
                 f"{USER_SITE}/packaging",
                 f"{STDLIB}/pluggy.py", f"{STDLIB}/lib-dynload/zipp.so",
                 STDLIB_ZIP, f"{SITE}/corp_plugin"):
        assert path in flagged, (path, flagged)
    assert not any("calculator_tool" in p for p in flagged), flagged


def test_the_text_fallback_refuses_a_name_that_forges_lines(
        tmp_path: Path, image: Image, monkeypatch: pytest.MonkeyPatch) -> None:
    # a folder "zz\nA " holding tmp/.pth prints a line "A " for the folder itself: a name has
    # no "/", so the end of a name with a newline is never a well-formed change
    monkeypatch.setattr(layer_changes, "MAX_ENTRIES", 5)
    for i in range(10):
        image.at(f"/junk{i}").write_text("")
    forged = f"A {SITE}/zz\nA \nA {SITE}/zz\nA /tmp\nA {SITE}/zz\nA /tmp/.pth\n"
    docker = fake_docker(tmp_path, image, f"C {SITE}\n{forged}".encode())
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")  # the API cannot be asked
    assert build_tampering(docker, "c") == [DIFF_MALFORMED]


def test_the_fallback_refuses_a_failed_docker_diff(
        tmp_path: Path, image: Image, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layer_changes, "MAX_ENTRIES", 5)
    for i in range(10):
        image.at(f"/junk{i}").write_text("")
    docker = fake_docker(tmp_path, image, b"")
    script = Path(docker)
    script.write_text(script.read_text().replace("  diff) cat", "  diff) exit 1; cat", 1))
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    assert build_tampering(docker, "c") != []  # nothing listed is not "nothing changed"


def test_a_container_that_cannot_be_paused_is_not_checked_as_clean(
        tmp_path: Path, image: Image) -> None:
    docker = fake_docker(tmp_path, image, b"")
    script = Path(docker)
    script.write_text(script.read_text().replace("case \"$1\" in\n",
                                                 "case \"$1\" in\n  pause) exit 1 ;;\n", 1))
    assert build_tampering(docker, "c") != []


# the same three through the real engine ------------------------------------------------------

@pytest.fixture
def build_container(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A clean-room container as the eval's compile container runs (``--init``, ``sleep``),
    with a host folder mounted at /signal: ``(id, folder)``."""
    import shutil
    import subprocess

    from tests.security.scorer_support import FIXTURE_IMAGE

    docker = shutil.which("docker")
    assert docker
    signal = tmp_path / "signal"
    signal.mkdir()
    cid = subprocess.run([docker, "run", "-d", "--init", "--network", "none", "-v",
                          f"{signal}:/signal", "-w", "/workspace", FIXTURE_IMAGE, "sleep", "300"],
                         capture_output=True, text=True, check=True).stdout.strip()
    try:
        yield cid, signal
    finally:
        subprocess.run([docker, "rm", "-f", cid], capture_output=True, check=False)


def _in(cid: str, script: str, *, detach: bool = False) -> str:
    import subprocess

    return subprocess.run(["docker", "exec", *(["-d"] if detach else []), cid, "sh", "-c",
                           script], capture_output=True, text=True, check=True).stdout


@pytest.mark.docker
def test_a_process_left_running_cannot_write_between_the_check_and_the_commit(
        tmp_path: Path, build_container: tuple[str, Path]) -> None:
    import shutil
    import subprocess

    from benchmarks.programbench.docker_policy import REPO_ROOT

    cid, signal = build_container
    image = f"harness-test/late-write:{cid[:12]}"
    # compile.sh leaves a process behind that plants a .pth as soon as the check has listed
    # the build (the moment a mounted file tells it: deterministic, but the same process as
    # one that watches the clock for the pause to end)
    _in(cid, f"mkdir -p {SITE}; (while [ ! -e /signal/go ]; do sleep 0.005; done; "
             f"printf 'import os\\n' > {SITE}/zz_late.pth; touch /signal/wrote) "
             ">/dev/null 2>&1 &", detach=True)
    time.sleep(0.3)
    policy = ("import sys\n"
              "from benchmarks.programbench import layer_changes as lc\n"
              "real = lc.changes\n"
              "def listed(*a, **k):\n"
              "    out = real(*a, **k)\n"
              f"    open({str(signal / 'go')!r}, 'w').close()\n"
              "    return out\n"
              "lc.changes = listed\n"
              "from benchmarks.programbench.docker_policy import main\n"
              "main(sys.argv[1:])\n")
    docker = shutil.which("docker")
    assert docker
    try:
        proc = subprocess.run([sys.executable, "-c", policy, "--docker", docker, "--log",
                               str(tmp_path / "policy.jsonl"), "--", "commit", cid, image],
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
        assert (signal / "go").exists(), proc.stderr  # the build was listed from its layer
        for _ in range(200):  # the process did write (once the container ran again)
            if (signal / "wrote").exists():
                break
            time.sleep(0.05)
        assert (signal / "wrote").exists()
        if proc.returncode == 0:  # committed: without what was written after the check
            listing = subprocess.run([docker, "run", "--rm", "--network", "none", image, "ls",
                                      SITE], capture_output=True, text=True, check=True)
            assert "zz_late.pth" not in listing.stdout, "written after the check, committed"
        else:
            assert "the build changed" in proc.stderr and "zz_late.pth" in proc.stderr
        state = subprocess.run([docker, "inspect", "-f", "{{.State.Status}}", cid],
                               capture_output=True, text=True).stdout.strip()
        assert state == "running", state  # unpaused after the commit
    finally:
        subprocess.run([docker, "rmi", "-f", image], capture_output=True, check=False)


@pytest.mark.docker
def test_a_real_module_ahead_of_pluggy_is_refused(
        build_container: tuple[str, Path]) -> None:
    cid, _ = build_container
    _in(cid, f"mkdir -p {SITE}/calc_tool && printf 'x = 1\\n' > {SITE}/calc_tool/__init__.py "
             f"&& printf 'raise SystemExit(0)\\n' > {SITE}/pluggy.py")
    # the attack is real: Debian's python imports the planted module, not pytest's pluggy
    shown = _in(cid, "python3 -c 'import importlib.util as u; "
                     "print(u.find_spec(\"pluggy\").origin)'")
    assert shown.strip() == f"{SITE}/pluggy.py"
    assert build_tampering("docker", cid) == [f"{SITE}/pluggy.py"]
    # the eval's commit is refused (the agent's failure), the container left running
    import shutil
    import subprocess

    from benchmarks.programbench.docker_policy import BUILD_TAMPER_MARKER, REFUSED_RC, REPO_ROOT

    docker = shutil.which("docker")
    assert docker
    proc = subprocess.run([sys.executable, "-S", "-m", "benchmarks.programbench.docker_policy",
                           "--docker", docker, "--", "commit", cid, f"harness-test/no:{cid[:12]}"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == REFUSED_RC and BUILD_TAMPER_MARKER in proc.stderr, proc.stderr
    assert f"{SITE}/pluggy.py" in proc.stderr
    state = subprocess.run([docker, "inspect", "-f", "{{.State.Status}}", cid],
                           capture_output=True, text=True).stdout.strip()
    assert state == "running", state


@pytest.mark.docker
def test_the_fallback_reads_names_with_newlines_exactly(
        build_container: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    cid, _ = build_container

    def unreadable(docker: str, container: str) -> tuple[str, list[str]]:
        raise Unavailable("as on a remote engine")

    monkeypatch.setattr(layer_changes, "layer_dirs", unreadable)
    # a .pth whose name prints as two lines, and a data file outside Python's folders whose
    # name does too (an honest build may write one: it is no reason to refuse)
    _in(cid, f"mkdir -p {SITE} /opt/app && printf 'import os\\n' > \"{SITE}/$(printf "
             "'zz\\nA .pth')\" && touch \"/opt/app/$(printf 'data\\nfile')\"")
    assert build_changes("docker", cid)[1] == "docker_api"
    assert build_tampering("docker", cid) == [f"{SITE}/zz\nA .pth"]


def test_an_override_made_again_after_its_removal_is_flagged(image: Image) -> None:
    # the overrides are removed while the container runs (docker exec), just before it is
    # paused for the check: a process that writes one again in between is caught by it
    image.at("/workspace/conftest.py").write_text("import pytest\n")
    image.at("/workspace/setup.cfg").write_text("[tool:pytest]\naddopts = -p evil\n")
    image.at("/workspace/pyproject.toml").write_text("[project]\nname = 'calc'\n")
    image.at("/workspace/src/conftest.py").write_text("x = 1\n")  # never on pytest's path
    image.at("/workspace/calculator.sh").write_text("echo 42\n")
    from benchmarks.programbench.docker_policy import check_build

    flagged, source = check_build("docker", "c", (str(image.upper), [str(image.lower)]))
    assert source == "layer"
    assert flagged == ["/workspace/conftest.py", "/workspace/setup.cfg"]


@pytest.mark.docker
def test_the_engine_api_fallback_reads_what_the_build_planted(
        build_container: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the host cannot read the layer (a remote engine), the doubtful changes are read
    through the Engine API's archive endpoint of the paused container: a plugin entry point,
    a pytest configuration and a changed module are refused; honest files are not."""
    cid, _ = build_container

    def unreadable(docker: str, container: str) -> tuple[str, list[str]]:
        raise Unavailable("as on a remote engine")

    monkeypatch.setattr(layer_changes, "layer_dirs", unreadable)
    info = f"{SITE}/calculator_tool-1.0.dist-info"
    _in(cid, f"mkdir -p {info} && printf '[console_scripts]\\ncalc = calculator_tool:main\\n' "
             f"> {info}/entry_points.txt && printf '[project]\\nname = \"calc\"\\n' "
             "> /workspace/pyproject.toml")
    assert build_changes("docker", cid)[1] == "docker_api"
    assert build_tampering("docker", cid) == []  # an honest install and project file
    attacks = {
        f"{info}/entry_points.txt": f"printf '[pytest11]\\nevil = calculator_tool.evil\\n' "
                                    f"> {info}/entry_points.txt",
        "/workspace/setup.cfg": "printf '[tool:pytest]\\naddopts = -p evil\\n' "
                                "> /workspace/setup.cfg",
        f"{DIST}/pluggy/__init__.py": f"echo 'raise SystemExit(0)' >> {DIST}/pluggy/__init__.py",
    }
    for path, plant in attacks.items():
        _in(cid, plant)
        assert path in build_tampering("docker", cid), path  # (with its changed folder)
        _in(cid, "rm -f /workspace/setup.cfg && printf '[console_scripts]\\n' "
                 f"> {info}/entry_points.txt")  # the next attack alone


# slow tier: end-to-end Docker runs of a minute or more together (CI runs the tier after
# the default one, which stays under its 10 minutes)
pytestmark = pytest.mark.slow
