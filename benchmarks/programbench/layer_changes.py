"""What a container's build changed under some paths, read from its overlay upper layer.

``docker diff`` answers the same question, but on a storage driver without a native diff
(``fuse-overlayfs``, ``vfs``) the daemon walks the whole image and the container side by side:
seconds for every eval. With an overlay driver whose layer folders this host can read (a local
daemon: ``docker inspect`` names them), the changes are the upper layer's entries, decided the
way the daemon's own overlay diff decides them (an upper entry is ``C`` when a lower layer has
the path, else ``A``; a whiteout, or a lower entry below a directory the build re-created or
replaced, is ``D``). A whiteout is a ``0:0`` character device or a ``.wh.<name>`` file; a
re-created directory is marked opaque (an xattr or a ``.wh..wh..opq`` entry).

Nothing of the layer is followed by the listing, nor read: names and ``lstat`` only, a bounded
number of entries (counted while a folder is read, so one huge folder is bounded too), and only
below the paths the caller asks about. The container is paused while its layer is listed, so a
process the build left running cannot swap a listed folder for a link between its ``lstat`` and
its listing. Any doubt (another driver, a remote daemon, a folder this host cannot read, too
many entries) is :class:`Unavailable`: the caller then asks the engine (its API, or ``docker
diff``). A running container that cannot be paused is :class:`PauseFailed`: the eval's check
refuses it (:func:`container_changes`, kept for a listing on its own, falls back instead).

Besides ``docker diff``'s kinds, a change is reported as :data:`LINK` (``L``) when the entry is
a symbolic link in the scope, or anything but a folder on the way to it (``/root/.local`` made a
link): what is below it is then decided by whatever it points at, which the listing never
follows.

The eval's build check keeps the container paused from its listing through the ``docker
commit`` (:func:`paused`), so what is committed is what was checked: a process the build left
running cannot write in between. While it is paused, :func:`look` may also read one small
file of the layer (an ``entry_points.txt``, a ``setup.cfg``) by walking it one folder at a
time, never following a link.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
from collections.abc import Iterator

from harness.api import read_capped

OVERLAY_DRIVERS = frozenset({"overlay2", "overlay", "fuse-overlayfs"})
MAX_ENTRIES = 200_000
WHITEOUT_PREFIX = ".wh."
OPAQUE_MARKERS = frozenset({".wh..wh..opq", ".wh..opq"})
OPAQUE_XATTRS = ("trusted.overlay.opaque", "user.overlay.opaque", "user.fuseoverlayfs.opaque")
LINK = "L"  # not a docker diff kind: a link in the scope, or a non-folder on the way to it


class Unavailable(Exception):
    """The layers cannot be read here: ask ``docker diff``."""


class PauseFailed(Exception):
    """``docker pause`` failed (a container that is not running, an engine without freezer)."""


def layer_dirs(docker: str, container: str) -> tuple[str, list[str]]:
    """``(upper, lowers)`` of ``container``, both readable on this host."""
    try:
        proc = subprocess.run([docker, "inspect", "--type", "container", "--format",
                               "{{json .GraphDriver}}", container],
                              capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"docker inspect: {exc}") from exc
    if proc.returncode != 0:
        raise Unavailable("docker inspect failed")
    try:
        driver = json.loads(proc.stdout)
        data = driver.get("Data") or {}
        name, upper, lower = driver.get("Name"), data.get("UpperDir"), data.get("LowerDir")
    except (ValueError, AttributeError) as exc:
        raise Unavailable(f"unexpected docker inspect output: {exc}") from exc
    if name not in OVERLAY_DRIVERS or not isinstance(upper, str) or not isinstance(lower, str):
        raise Unavailable(f"storage driver {name!r} has no readable upper layer")
    lowers = [p for p in lower.split(":") if p]
    for folder in (upper, *lowers):
        if not os.path.isabs(folder) or not _is_real_dir(folder):
            raise Unavailable(f"layer folder not readable on this host: {folder}")
    return upper, lowers


def _is_real_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode) and os.access(path, os.R_OK | os.X_OK)
    except OSError:
        return False


def _lower_stat(lowers: list[str], path: str) -> os.stat_result | None:
    for layer in lowers:
        try:
            return os.lstat(layer + path)
        except OSError:
            continue
    return None


def _lower_children(lowers: list[str], path: str) -> set[str]:
    names: set[str] = set()
    for layer in lowers:
        folder = layer + path
        if _is_real_dir(folder):
            try:
                names |= {n for n in os.listdir(folder)
                          if n not in OPAQUE_MARKERS and not n.startswith(WHITEOUT_PREFIX)}
            except OSError:
                continue
    return names


def _opaque(folder: str, names: set[str]) -> bool:
    if names & OPAQUE_MARKERS:
        return True
    for attr in OPAQUE_XATTRS:
        try:
            if os.getxattr(folder, attr, follow_symlinks=False) == b"y":
                return True
        except OSError:
            continue
    return False


def changes(upper: str, lowers: list[str], scope: tuple[str, ...]) -> list[tuple[str, str]]:
    """``[(kind, path)]`` like ``docker diff`` prints them, for the paths that start with one
    of ``scope`` (container paths, e.g. ``/usr/lib/python3``)."""

    def relevant(path: str) -> bool:
        return path.startswith(scope)

    def on_the_way(path: str) -> bool:
        return any(s.startswith(path + "/") for s in scope)

    def wanted(path: str) -> bool:
        return relevant(path) or on_the_way(path)

    found: list[tuple[str, str]] = []
    seen = 0
    stack = [""]
    while stack:
        rel = stack.pop()
        folder = upper + rel
        entries: list[os.DirEntry[str]] = []
        try:
            with os.scandir(folder) as it:
                for entry in it:  # counted as read: one folder of millions is bounded too
                    seen += 1
                    if seen > MAX_ENTRIES:
                        raise Unavailable(f"more than {MAX_ENTRIES} entries in the upper layer")
                    entries.append(entry)
        except OSError as exc:
            raise Unavailable(f"cannot list {folder}: {exc}") from exc
        names = {e.name for e in entries}
        if rel and _opaque(folder, names):  # re-created: what the lower had below is gone
            found += [("D", f"{rel}/{c}") for c in sorted(_lower_children(lowers, rel))
                      if c not in names and wanted(f"{rel}/{c}")]
        for entry in entries:
            name = entry.name
            if name in OPAQUE_MARKERS:
                continue
            if name.startswith(WHITEOUT_PREFIX):
                path = f"{rel}/{name[len(WHITEOUT_PREFIX):]}"
                if wanted(path):
                    found.append(("D", path))
                continue
            path = f"{rel}/{name}"
            ahead = on_the_way(path)
            if not relevant(path) and not ahead:
                continue
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                found.append(("D", path))
                continue
            low = _lower_stat(lowers, path)
            if relevant(path):
                found.append(("C" if low is not None else "A", path))
            is_dir = stat.S_ISDIR(st.st_mode)
            if stat.S_ISLNK(st.st_mode) or (ahead and not is_dir):
                found.append((LINK, path))  # never followed: what it points at decides
            if low is not None and stat.S_ISDIR(low.st_mode) and not is_dir:
                # a directory replaced by a file or a link: what was below it is gone
                found += [("D", f"{path}/{c}") for c in sorted(_lower_children(lowers, path))
                          if wanted(f"{path}/{c}")]
            if is_dir:
                stack.append(path)
    return sorted(set(found), key=lambda kp: kp[1])


def container_changes(docker: str, container: str,
                      scope: tuple[str, ...]) -> list[tuple[str, str]]:
    """:func:`changes` of ``container``, paused while its layer is listed (a process the
    build left running could otherwise swap a folder for a link mid-walk; paused while
    ``docker inspect`` runs, unpaused on every path); raises :class:`Unavailable`."""
    try:
        pausing = subprocess.Popen([docker, "pause", container], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
    except OSError as exc:
        raise Unavailable(f"docker pause: {exc}") from exc
    try:
        upper, lowers = layer_dirs(docker, container)
        if _status(pausing) != 0:
            raise Unavailable("docker pause failed")
        return changes(upper, lowers, scope)
    finally:
        status = _status(pausing)
        if status == 0:
            _unpause(docker, container)
        elif status is None:  # stopped mid-way: it may have paused it
            with contextlib.suppress(Unavailable):
                _unpause(docker, container)


def _status(proc: subprocess.Popen[bytes]) -> int | None:
    """Exit status of ``proc``; None when it had to be stopped (it may have paused)."""
    try:
        status = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        status = proc.wait()
    return status if status >= 0 else None


def _unpause(docker: str, container: str) -> None:
    for _ in range(2):
        try:
            if subprocess.run([docker, "unpause", container], capture_output=True,
                              timeout=60, check=False).returncode == 0:
                return
        except (OSError, subprocess.TimeoutExpired):
            continue
    raise Unavailable("docker unpause failed")


@contextlib.contextmanager
def paused(docker: str, container: str) -> Iterator[tuple[str, list[str]] | None]:
    """Keep ``container`` paused for the block, yielding its ``(upper, lowers)`` (None: not
    readable on this host, ask ``docker diff``). ``docker inspect`` runs while the pause is
    under way. Unpaused on every path out (an error, ``sys.exit``); a failed unpause is
    retried once, then left (the eval removes the container). Raises :class:`PauseFailed`
    when the container could not be paused (nothing is yielded then)."""
    try:
        pausing = subprocess.Popen([docker, "pause", container], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
    except OSError as exc:
        raise PauseFailed(f"docker pause: {exc}") from exc
    try:
        try:
            layers: tuple[str, list[str]] | None = layer_dirs(docker, container)
        except Unavailable:
            layers = None
        if _status(pausing) != 0:
            raise PauseFailed("docker pause failed")
        yield layers
    finally:
        status = _status(pausing)
        if status == 0 or status is None:  # None: stopped mid-way, it may have paused it
            with contextlib.suppress(Unavailable):
                _unpause(docker, container)


def shallow_entries(upper: str, folder: str, depth: int) -> list[tuple[str, str]]:
    """``[(kind, path)]`` of the upper layer's entries below ``folder`` (a container path such
    as ``/workspace``), ``depth`` levels deep: ``A`` for an entry (added or changed),
    :data:`LINK` for ``folder`` itself when the layer made it something else than a folder.
    Whiteouts and opaque markers are left out; a link is an entry, never descended; bounded by
    :data:`MAX_ENTRIES` (:class:`Unavailable`)."""
    base = upper + folder
    try:
        st = os.lstat(base)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise Unavailable(f"cannot stat {base}: {exc}") from exc
    if not stat.S_ISDIR(st.st_mode):
        return [(LINK, folder)]
    found: list[tuple[str, str]] = []
    level = [folder]
    seen = 0
    for _ in range(depth):
        below: list[str] = []
        for rel in level:
            try:
                with os.scandir(upper + rel) as it:
                    for entry in it:
                        seen += 1
                        if seen > MAX_ENTRIES:
                            raise Unavailable(f"more than {MAX_ENTRIES} entries below {folder}")
                        if entry.name in OPAQUE_MARKERS or entry.name.startswith(
                                WHITEOUT_PREFIX):
                            continue
                        est = entry.stat(follow_symlinks=False)
                        if stat.S_ISCHR(est.st_mode) and est.st_rdev == 0:
                            continue  # a whiteout: the entry is gone
                        path = f"{rel}/{entry.name}"
                        found.append(("A", path))
                        if stat.S_ISDIR(est.st_mode):
                            below.append(path)
            except OSError as exc:
                raise Unavailable(f"cannot list {upper + rel}: {exc}") from exc
        level = below
    return found


def top_level_names(lowers: list[str], folders: tuple[str, ...]) -> set[str]:
    """The names in ``folders`` (container paths) of the image's layers: what a module of the
    same name earlier on ``sys.path`` would replace."""
    names: set[str] = set()
    for folder in folders:
        names |= _lower_children(lowers, folder)
    return names


FOLDER, FILE, SYMLINK, OTHER, MISSING = "dir", "file", "link", "other", "missing"


def look(upper: str, path: str, limit: int = 0) -> tuple[str, bytes | None]:
    """``(type, data)`` of ``path`` (a container path) in the upper layer of a container no
    process changes meanwhile (paused): one folder at a time from ``upper``, none of them a
    link (``O_NOFOLLOW``); ``data`` is the first ``limit`` bytes of a regular file when
    ``limit`` is given (``limit + 1`` bytes read: more means too large)."""
    parts = [p for p in path.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        return OTHER, None
    fd = os.open(upper, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            try:
                new = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                return MISSING, None
            except OSError:  # a link or a file on the way
                return OTHER, None
            os.close(fd)
            fd = new
        try:
            st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return MISSING, None
        if stat.S_ISLNK(st.st_mode):
            return SYMLINK, None
        if stat.S_ISDIR(st.st_mode):
            return FOLDER, None
        if not stat.S_ISREG(st.st_mode):
            return OTHER, None
        if not limit:
            return FILE, None
        try:
            ffd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
        except OSError:
            return OTHER, None
        try:
            if not stat.S_ISREG(os.fstat(ffd).st_mode):
                return OTHER, None
            return FILE, read_capped(ffd, limit)
        finally:
            os.close(ffd)
    finally:
        os.close(fd)
