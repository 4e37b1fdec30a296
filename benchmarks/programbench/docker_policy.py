"""The docker CLI ``programbench eval`` talks to: the real one, under our policy.

The official package runs every container through ``$PROGRAMBENCH_DOCKER_EXECUTABLE``
(read once, at import). We point it at a small generated ``sh`` script: the sub-commands the
policy decides on (``run``, ``create``, ``container``, ``network``, ``commit``, a global option,
the ``exec`` of ``eval/run.sh``) start this module; every other call goes to the real
``docker`` unchanged, with no Python started (``exec``: same process, same stdin, same exit
code). This module passes each call on unchanged too, except:

* ``run``/``create`` (also ``container run``/``container create``): ``--network none`` is
  added; a ``--network``/``--net`` of the caller's, or a global option before the
  sub-command, is refused (exit 125). The eval's compile and test containers have no
  network, so a ``compile.sh`` cannot fetch the original source and a test-time program
  cannot reach anything. Each container (and the committed image) carries the label
  ``harness.pb_eval=<call>``, so :func:`sweep` removes what a stopped CLI left behind.
  Created containers are logged with their id and image. A container of an image the eval
  did not build (the clean room ``compile.sh`` runs in) gets a stat snapshot of the paths
  that steer the tests (:data:`PYTHON_ROOTS`, the login files), taken before the CLI learns
  its id, so before anything of the submission is in it.
* the ``exec`` that runs a branch's ``eval/run.sh``: its pytest also loads
  :mod:`~benchmarks.programbench.results_guard_plugin` (copied in under a random name), which
  ends every process the program under test left behind before the JUnit XML is written.
* ``network``: refused (nothing may connect a container to a network).
* ``commit`` (the eval commits the compile container once, after ``compile.sh``, which runs
  as root): first the files a build could have written to steer the tests' pytest are
  deleted in that container (the same root rules as
  :mod:`benchmarks.programbench.scorer_guard`, applied to ``/workspace`` and ``/``), so
  generating a ``conftest.py`` at build time gains nothing. Then the container is paused, and
  stays paused until ``docker commit`` has made the image (unpaused on every path): a process
  the build left running cannot write between the check and the commit. While it is paused,
  the build's changes are read from its upper layer on this host
  (:mod:`~benchmarks.programbench.layer_changes`), else from the engine's API (JSON, so a
  name with a newline is one path), else ``docker diff``. A build that changed Python's own
  files, pytest or its plugins, added a ``.pth``, ``sitecustomize``, a module ahead of one the
  scorer imports (the standard library's folders, the user site and /usr/local's
  dist-packages come before Debian's /usr/lib/python3/dist-packages), a ``pytest11`` entry
  point, a file a login shell reads, or made a workspace override again after its removal,
  is refused (exit 125, :data:`BUILD_TAMPER_MARKER`: the eval errors, the agent's failure).
  A running container that cannot be paused is refused too, without that marker (the
  engine's doing).

Each decision is appended to a JSON-lines log that the caller reads back as evidence, with
the seconds the policy spent on it (``took_s``).
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from benchmarks.programbench.program_user import (
    PROGRAM_UID,
    build_command,
    build_exec_flags,
    end_program_script,
    judge_prefix,
    program_files_in_layer,
    sweep_script,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    # (type, data) of one path of the build container: see layer_changes.look
    Look = Callable[[str, int], tuple[str, bytes | None]]

WRAPPER_NAME = "docker"
LOG_NAME = "docker_policy.jsonl"
REFUSED_RC = 125
LABEL_KEY = "harness.pb_eval"  # value: the policy folder's name, one per eval call
NETWORK_FLAGS = ("--network", "--net")
CREATE_COMMANDS = ("run", "create")
REPO_ROOT = Path(__file__).resolve().parents[2]


class PolicyRefused(Exception):
    pass


def rewrite(args: list[str], label: str | None = None) -> list[str]:
    """The argv (after ``docker``) the real CLI gets; raises :class:`PolicyRefused`."""
    if not args:
        return args
    if args[0].startswith("-"):
        raise PolicyRefused(f"global docker options are not allowed: {args[0]}")
    head = 2 if args[0] == "container" and len(args) > 1 else 1
    sub = args[head - 1]
    if sub == "network":
        raise PolicyRefused("docker network commands are not allowed")
    if sub not in CREATE_COMMANDS:
        return args
    for arg in args[head:]:
        if arg in NETWORK_FLAGS or arg.startswith(tuple(f + "=" for f in NETWORK_FLAGS)):
            raise PolicyRefused(f"a container network may not be chosen: {arg}")
    tag = ["--label", f"{LABEL_KEY}={label}"] if label else []
    # no setuid bit works in the eval's containers: the build and the program, which run as
    # the program user (see program_user), cannot become root through one the image has
    return [*args[:head], "--network", "none", "--security-opt", "no-new-privileges", *tag,
            *args[head:]]


VALUE_FLAGS = frozenset({
    "--name", "-w", "--workdir", "--cpus", "-e", "--env", "--network", "-u", "--user", "-v",
    "--volume", "-m", "--memory", "-l", "--label", "--entrypoint", "--mount", "--cap-add",
    "--cap-drop", "--pids-limit", "--env-file", "--hostname", "-h", "--platform",
    "--security-opt",
})


def image_of(args: list[str]) -> str:
    """The image of a ``run``/``create`` argv (the first positional after the options)."""
    rest = args[2:] if args[:1] == ["container"] else args[1:]
    skip = False
    for arg in rest:
        if skip:
            skip = False
        elif arg in VALUE_FLAGS:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return ""


def _log(path: str | None, entry: dict[str, object]) -> None:
    if not path:
        return
    line = json.dumps({"ts": round(time.time(), 3), **entry}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _exec_in(docker: str, container: str, argv: list[str], timeout: float = 120) -> bytes:
    try:
        proc = subprocess.run([docker, "exec", "-u", "0", container, *argv],
                              capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return b""
    return proc.stdout if proc.returncode == 0 else b""


def build_overrides(docker: str, container: str, prelude: str = "") -> list[str]:
    """Paths in ``container`` (absolute) that would steer the tests' pytest (``prelude``:
    shell run first in the same exec)."""
    from benchmarks.programbench.scorer_rules import (
        EDITED_CONFIGS,
        MAX_CONFIG_BYTES,
        ROOT_PYTEST_FILES,
    )

    # one exec: the workspace's top two levels, then ini files at /, then the two editable
    # configs when they are not regular files (links, FIFOs...), NUL-separated sections
    tops = " ".join(f"/{n}" for n in sorted(ROOT_PYTEST_FILES))
    configs = " ".join(f"/workspace/{n}" for n in EDITED_CONFIGS)
    script = (
        "find /workspace -mindepth 1 -maxdepth 2 -print0; printf '\\0--\\0'; "
        f"for p in {tops}; do if [ -e $p ] || [ -L $p ]; then printf '%s\\0' $p; fi; done; "
        "printf '\\0--\\0'; "
        f"for p in {configs}; do if [ -L $p ] || {{ [ -e $p ] && [ ! -f $p ]; }}; then "
        "printf '%s\\0' $p; fi; done"
    )
    out = _exec_in(docker, container, ["sh", "-c", f"{prelude}; {script}" if prelude
                                       else script])
    sections = out.split(b"\0--\0")
    if len(sections) != 3:
        return ["(the build's workspace could not be listed)"]
    listing, at_root, odd = ([x.decode(errors="surrogateescape") for x in sec.split(b"\0") if x]
                             for sec in sections)
    found: list[str] = [*at_root, *odd]
    for path in listing:
        rel = path.removeprefix("/workspace/")
        parts = rel.split("/")
        if not rel.startswith("/") and workspace_override(parts):
            found.append(path)
    for name in EDITED_CONFIGS:
        path = f"/workspace/{name}"
        if path in found or path not in listing:
            continue
        data = _exec_in(docker, container, ["head", "-c", str(MAX_CONFIG_BYTES + 1), path], 60)
        if len(data) > MAX_CONFIG_BYTES or _config_edited(name, data):
            found.append(path)
    return sorted(set(found))


BUILD_TAMPER_MARKER = "docker policy: the build changed what the tests' pytest runs on"
# where the tests' Python imports from (a link here, or one on the way, steers)
IMPORT_ROOTS = ("/usr/lib/python3", "/usr/local/lib/python3", "/root/.local/lib/python",
                "/etc/python3")
PYTHON_ROOTS = (*IMPORT_ROOTS, "/usr/bin/python", "/usr/local/bin/python", "/usr/bin/pytest",
                "/usr/local/bin/pytest", "/usr/bin/py.test")
# the tests' PATH (docker exec resolves ``bash`` with it, ``bash -lc`` gets it from
# /etc/profile): a command the eval's test exec or run.sh runs by name, planted ahead of the
# image's or changed in place, runs instead of it
PATH_FOLDERS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
TEST_COMMAND_PREFIXES = ("python", "pytest", "py.test", "pip")
TEST_COMMANDS = frozenset({"bash", "sh", "dash", "env", "dirname", "chmod", "rm", "mv", "cp",
                           "sed", "grep", "find", "sha256sum", "test", "[", "mkdir", "tar",
                           "cat", "timeout"})
STEERING_NAMES = ("sitecustomize.py", "usercustomize.py")
STEERING_DIRS = ("/_pytest/", "/pytest/", "/pluggy/", "/xdist/", "/iniconfig/", "/junitparser/")
LOGIN_FILES = frozenset({"/etc/profile", "/etc/bash.bashrc", "/etc/bashrc", "/etc/environment",
                         "/root/.profile", "/root/.bash_profile", "/root/.bash_login",
                         "/root/.bashrc", "/root/.pam_environment"})
MAX_DIFF_CHECKED = 5000


def _on_the_way(path: str) -> bool:
    """A folder some path of :data:`TAMPER_SCOPE` is below (``/root/.local``, ``/usr``)."""
    return any(s.startswith(path.rstrip("/") + "/") for s in TAMPER_SCOPE)


# The image's sys.path after the working directory (Debian's python3): a zip, the standard
# library and its lib-dynload, the user site, /usr/local/lib/python3.X/dist-packages, then
# /usr/lib/python3/dist-packages (pytest and its plugins). A module added to an entry replaces
# one of the same name in every later entry.
SYS_PATH_ZIP = r"/usr/lib/python3\d+\.zip"
STDLIB_ENTRY = r"/usr/lib/python3\.\d+(/lib-dynload)?"
SITE_ENTRY = r"/root/\.local/lib/python3\.\d+/site-packages|/usr/local/lib/python3\.\d+/dist-packages"
LAST_SITE = "/usr/lib/python3/dist-packages"
MODULE_NAME = r"([A-Za-z_][A-Za-z0-9_]*)(\.py|\.pyc|\.pyw|(\.[A-Za-z0-9_-]+)?\.so)?"


def _full(pattern: str, text: str) -> Any:
    import re  # compiled (and cached) at the first build check, not at every docker call

    return re.fullmatch(pattern, text)


def module_name(name: str) -> str | None:
    """The module a top-level entry named ``name`` of a ``sys.path`` folder provides (a
    module file, a package or namespace folder), or None."""
    match = _full(MODULE_NAME, name)
    if match is None or name == "__pycache__":
        return None
    return str(match.group(1))


def _site_shadow_names() -> frozenset[str]:
    from benchmarks.programbench.scorer_rules import SITE_SHADOW_NAMES

    return SITE_SHADOW_NAMES


def _shadows(path: str, shadowable: frozenset[str] | set[str]) -> bool:
    """An added entry ``path`` puts a module ahead of one the scorer imports: anything
    importable added to the standard library's folders (they come before every site folder),
    a module of ``shadowable`` added to the user site or /usr/local's dist-packages, or a zip
    on sys.path."""
    if _full(SYS_PATH_ZIP, path):
        return True
    folder, _, name = path.rpartition("/")
    module = module_name(name)
    if module is None:
        return False
    if _full(STDLIB_ENTRY, folder):
        return True
    return _full(SITE_ENTRY, folder) is not None and module in shadowable


def _steers(kind: str, path: str,
            shadowable: frozenset[str] | set[str] | None = None) -> bool | None:
    """True: this build change steers the tests' Python/pytest or their login shell; None:
    only if it is a regular file (a changed existing module) or, on the way to the scope, a
    link or a non-folder; False: harmless. ``kind`` is ``docker diff``'s, or ``L`` (a link, or
    a non-folder on the way: :data:`~benchmarks.programbench.layer_changes.LINK`).
    ``shadowable``: the modules an added top-level module of a site folder may not be named
    (what the scorer imports from a later sys.path entry)."""
    if path in LOGIN_FILES or path.startswith("/etc/profile.d/"):
        return True
    folder, _, name = path.rpartition("/")
    if folder in PATH_FOLDERS:
        return name in TEST_COMMANDS or name.startswith(TEST_COMMAND_PREFIXES)
    if kind == "L" and (path.startswith(IMPORT_ROOTS) or path == "/etc/profile.d"):
        return True
    if _on_the_way(path):  # /usr, /root/.local: a link there moves what is below
        return True if kind in ("D", "L") else None
    if not path.startswith(PYTHON_ROOTS):
        return False
    if kind == "D" or name.endswith(".pth") or name in STEERING_NAMES:
        return True
    if kind == "A" and _shadows(path, _site_shadow_names() if shadowable is None
                                else shadowable):
        return True
    if name.endswith(".pyc") and path.startswith("/usr/lib/python3"):
        return True  # a cached module the system's own sources would load
    if any(d in path + "/" for d in STEERING_DIRS) or name.startswith(("pytest", "_pytest")):
        return True
    if name == "entry_points.txt" or kind == "C":
        return None  # a [pytest11] entry point autoloads a plugin; a changed module steers
    return False


TAMPER_SCOPE = (*PYTHON_ROOTS, *(f"{f}/" for f in PATH_FOLDERS), *sorted(LOGIN_FILES),
                "/etc/profile.d")
DIFF_KINDS = ("A", "C", "D")
API_KINDS = {0: "C", 1: "A", 2: "D"}  # the Engine API's ContainerChanges "Kind"
WORKSPACE = "/workspace"
WORKSPACE_DEPTH = 2  # the levels the workspace's overrides are looked for (build_overrides)


def _shown(path: str) -> str:
    """``path`` as UTF-8 text for the log and the evidence: a byte that is not UTF-8 (a
    surrogate once decoded) is written as ``\\xff``, which JSON and pydantic accept."""
    try:
        return os.fsencode(path).decode("utf-8", "backslashreplace")
    except UnicodeError:
        return path.encode("utf-8", "backslashreplace").decode("utf-8")


def _in_workspace(path: str) -> bool:
    return path.startswith(WORKSPACE + "/") and path.count("/") <= WORKSPACE_DEPTH + 1


def _checked_here(path: str) -> bool:
    return path.startswith(TAMPER_SCOPE) or _on_the_way(path) or _in_workspace(path)


def _unknown(path: str, limit: int) -> tuple[str, bytes | None]:
    return "unknown", None


def _api_client() -> Any:
    """A Docker SDK client for the engine the CLI talks to (``DOCKER_HOST``), or None."""
    _ensure_site()
    try:
        import docker as docker_sdk

        host = os.environ.get("DOCKER_HOST", "")
        return docker_sdk.from_env(timeout=300, use_ssh_client=host.startswith("ssh"))
    except Exception:  # no SDK, no engine at DOCKER_HOST (a CLI context): the CLI's text
        return None


def _api_changes(client: Any, container: str) -> list[tuple[str, str]] | str | None:
    """The container's changes from the Engine API (JSON ``{Path, Kind}``: a name with a
    newline is one path), a refusal, or None when the API could not be asked."""
    try:
        raw = client.api.diff(container)
    except Exception:
        return None
    pairs: list[tuple[str, str]] = []
    for item in raw or []:
        code = item.get("Kind") if isinstance(item, dict) else None
        kind = API_KINDS.get(code) if isinstance(code, int) else None
        path = item.get("Path") if isinstance(item, dict) else None
        if kind is None or not isinstance(path, str) or not path.startswith("/"):
            return DIFF_MALFORMED
        pairs.append((kind, path))
    return pairs


GO_TYPE_BITS = (1 << 31) | (1 << 27) | (1 << 26) | (1 << 25) | (1 << 24) | (1 << 21) | (1 << 19)


def _api_look(client: Any, container: str) -> Look:
    """:data:`Look` through the Engine API's archive endpoint (works on a paused container):
    its stat header for the type, the tar of a regular file for ``data``."""
    import contextlib
    import io
    import tarfile

    def look(path: str, limit: int = 0) -> tuple[str, bytes | None]:
        try:
            stream, st = client.api.get_archive(container, path, chunk_size=1 << 16)
        except Exception as exc:
            return ("missing" if getattr(exc, "status_code", None) == 404 else "unknown"), None
        try:
            mode = int(st.get("mode", 0)) if isinstance(st, dict) else -1
            if mode < 0 or (isinstance(st, dict) and st.get("linkTarget")):
                return ("link" if mode >= 0 else "unknown"), None
            if mode & (1 << 31):
                return "dir", None
            if mode & GO_TYPE_BITS:
                return "other", None
            if not limit:
                return "file", None
            data = b""
            for chunk in stream:
                data += chunk
                if len(data) > limit + (1 << 16):
                    return "file", b"\0" * (limit + 1)  # too large
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                member = tar.next()
                if member is None or not member.isfile():
                    return "other", None
                handle = tar.extractfile(member)
                return "file", handle.read(limit + 1) if handle else None
        except Exception:
            return "unknown", None
        finally:
            with contextlib.suppress(Exception):
                stream.close()

    return look


def _text_changes(docker: str, container: str) -> list[tuple[str, str]] | str:
    """``docker diff``'s lines (when the API cannot be asked): a path is printed unescaped, so
    a name with a newline splits into a line that is not "<kind> /<path>" (the name's end has
    no "/"): such a diff cannot be read, never partly."""
    try:
        proc = subprocess.run([docker, "diff", container], capture_output=True, timeout=300,
                              check=False)
    except subprocess.TimeoutExpired:
        return DIFF_TIMED_OUT
    if proc.returncode != 0:
        return DIFF_FAILED
    diff = proc.stdout.decode(errors="replace").split("\n")
    if diff and diff[-1] == "":
        diff.pop()
    pairs = [line.partition(" ") for line in diff]
    if any(kind not in DIFF_KINDS or sep != " " or not path.startswith("/")
           for kind, sep, path in pairs):
        return DIFF_MALFORMED
    return [(kind, path) for kind, _, path in pairs]


def _diff_changes(docker: str, container: str) -> tuple[list[tuple[str, str]], str, Look]:
    """``(changes, source, look)`` from the engine: its API (``docker_api``), else ``docker
    diff`` (``docker_diff``, every path; it walks the whole image on a naive-diff driver).
    ``source`` is one of :data:`DIFF_REFUSALS` when they cannot be read."""
    client = _api_client()
    listed: list[tuple[str, str]] | str | None = None
    look: Look = _unknown
    source = "docker_api"
    if client is not None:
        listed = _api_changes(client, container)
        look = _api_look(client, container)
    if listed is None:
        listed, source = _text_changes(docker, container), "docker_diff"
    if isinstance(listed, str):
        return [], listed, look
    kept = [(kind, path) for kind, path in listed if _checked_here(path)]
    if len(kept) > MAX_DIFF_CHECKED:  # never cut: what is past a cap goes unchecked
        return [], DIFF_TOO_MANY, look
    return kept, source, look


DIFF_TIMED_OUT = "(docker diff timed out)"
DIFF_FAILED = "(docker diff failed)"
DIFF_MALFORMED = "(docker diff has a line that is not a change: a name with a newline?)"
DIFF_TOO_MANY = f"(docker diff lists more than {MAX_DIFF_CHECKED} changes where Python looks)"
DIFF_REFUSALS = (DIFF_TIMED_OUT, DIFF_FAILED, DIFF_MALFORMED, DIFF_TOO_MANY)


def _site_names(lowers: list[str]) -> set[str]:
    """The modules of the image's site folders (what the scorer may import from them)."""
    from benchmarks.programbench.layer_changes import top_level_names

    folders = [LAST_SITE]
    for base in ("/usr/local/lib", "/root/.local/lib"):
        folders += [f"{base}/{v}/{'dist' if base == '/usr/local/lib' else 'site'}-packages"
                    for v in top_level_names(lowers, (base,)) if v.startswith("python3.")]
    return {m for n in top_level_names(lowers, tuple(folders)) if (m := module_name(n))}


def _build_view(docker: str, container: str, layers: tuple[str, list[str]] | None
                ) -> tuple[list[tuple[str, str]], str, Look, frozenset[str]]:
    """``(changes, source, look, shadowable)`` of a build container no process changes
    meanwhile (paused, or not running): from its upper layer (``layer``) when ``layers``
    is given and can be listed, else from the engine (:func:`_diff_changes`)."""
    import functools

    from benchmarks.programbench.layer_changes import (
        Unavailable,
        changes,
        look,
        shallow_entries,
    )

    if layers is not None:
        upper, lowers = layers
        try:
            found = changes(upper, lowers, TAMPER_SCOPE)
            found += shallow_entries(upper, WORKSPACE, WORKSPACE_DEPTH)
            shadowable = _site_shadow_names() | _site_names(lowers)
            return found, "layer", functools.partial(look, upper), shadowable
        except (Unavailable, OSError):
            pass
    found, source, api_look = _diff_changes(docker, container)
    return found, source, api_look, _site_shadow_names()


def build_changes(docker: str, container: str) -> tuple[list[tuple[str, str]], str]:
    """``([(kind, path)], source)``: what the build changed under :data:`TAMPER_SCOPE` and in
    the workspace's top levels, the container paused while they are read (see
    :func:`_build_view`; a container that cannot be paused is read as it is)."""
    from benchmarks.programbench.layer_changes import PauseFailed, paused

    try:
        with paused(docker, container) as layers:
            return _build_view(docker, container, layers)[:2]
    except PauseFailed:
        return _build_view(docker, container, None)[:2]


def build_tampering(docker: str, container: str) -> list[str]:
    """Changes the build made outside ``/workspace`` that would steer the tests: Python's own
    files, pytest and its plugins, ``.pth``/``sitecustomize``, a module ahead of one the
    scorer imports, plugin entry points, the files a login shell reads (the eval runs its
    tests under ``bash -lc``); and the workspace's overrides. The container is paused while
    it is checked (:func:`check_build`)."""
    from benchmarks.programbench.layer_changes import PauseFailed, paused

    try:
        with paused(docker, container) as layers:
            return check_build(docker, container, layers)[0]
    except PauseFailed:
        if _container_running(docker, container) is not False:
            return [PAUSE_FAILED]  # no check of a running container stands
        return check_build(docker, container, _layers(docker, container))[0]


def _layers(docker: str, container: str) -> tuple[str, list[str]] | None:
    from benchmarks.programbench.layer_changes import Unavailable, layer_dirs

    try:
        return layer_dirs(docker, container)
    except Unavailable:
        return None


PAUSE_FAILED = "(the build container could not be paused for its check)"


def check_build(docker: str, container: str, layers: tuple[str, list[str]] | None
                ) -> tuple[list[str], str]:
    """``(steering paths, source)`` of a build container no process changes meanwhile."""
    found, source, look, shadowable = _build_view(docker, container, layers)
    if source in DIFF_REFUSALS:
        return [source], source
    return tampered_paths(found, look, shadowable, first_only=source != "layer"), source


def tampered_paths(found: list[tuple[str, str]], look: Look,
                   shadowable: frozenset[str] | set[str] | None = None,
                   first_only: bool = False) -> list[str]:
    """The paths of ``found`` that steer the tests; ``look`` decides the doubtful ones (with
    ``first_only``, none once one steers: each look is then a request to the engine)."""
    from benchmarks.programbench.scorer_rules import EDITED_CONFIGS, MAX_CONFIG_BYTES

    flagged: list[str] = []
    maybe: list[str] = []
    configs: list[str] = []
    for kind, path in found:
        if path.startswith(WORKSPACE + "/"):
            parts = path[len(WORKSPACE) + 1:].split("/")
            if kind == "D":
                continue  # removed: what the overrides' removal leaves
            if kind == "L" or workspace_override(parts):
                flagged.append(path)  # an override made (again) after they were removed
            elif len(parts) == 1 and parts[0] in EDITED_CONFIGS:
                configs.append(path)
            continue
        if path == WORKSPACE:  # the tests' folder itself: a folder, or it steers
            if kind == "L":
                flagged.append(path)
            elif kind != "D":
                maybe.append(path)
            continue
        verdict = _steers(kind, path, shadowable)
        if verdict:
            flagged.append(path)
        elif verdict is None:
            maybe.append(path)
    # in a state no process changes, a path with a change listed below it is a folder
    folders: set[str] = set()
    for kind, path in found:
        if kind != "D":
            while (cut := path.rfind("/")) > 0 and (path := path[:cut]) not in folders:
                folders.add(path)
    maybe = [p for p in maybe if p not in folders]
    if len(maybe) > MAX_DIFF_CHECKED:
        flagged.append(f"({len(maybe)} changed files where Python looks, too many to check)")
        maybe = []
    for path in maybe:
        if flagged and first_only:
            break  # refused anyway
        entry_points = path.endswith("/entry_points.txt")
        kind_of, data = look(path, MAX_CONFIG_BYTES if entry_points else 0)
        if kind_of == "dir":
            continue
        if kind_of == "file" and entry_points and data is not None and (
                len(data) <= MAX_CONFIG_BYTES and b"pytest11" not in data):
            continue
        flagged.append(path)  # a link, a changed module, a plugin, what cannot be read
    for path in configs:
        kind_of, data = look(path, MAX_CONFIG_BYTES)
        if kind_of != "file" or data is None or len(data) > MAX_CONFIG_BYTES or (
                _config_edited(path.rsplit("/", 1)[1], data)):
            flagged.append(path)
    return sorted(set(flagged))


def _ensure_site() -> None:
    """The site packages, in a shim started with ``-S`` (its fast path needs none of them)."""
    if sys.flags.no_site and "site" not in sys.modules:
        import site

        site.main()


def workspace_override(parts: list[str]) -> bool:
    """A workspace path (split at ``/``) the overrides' removal takes away: a pytest config,
    the reserved ``eval/`` folder itself, a module shadowing one the tests import."""
    from benchmarks.programbench.scorer_rules import root_reason

    return root_reason(parts) is not None and (len(parts) == 1 or parts[0] != "eval")


def _config_edited(name: str, data: bytes) -> bool:
    """``setup.cfg``/``pyproject.toml`` that still configure pytest (or cannot be parsed)."""
    from benchmarks.programbench.scorer_rules import edit_config

    _ensure_site()  # a setup.cfg is read with iniconfig, from the site packages
    return edit_config(name, data) != data


RUN_TESTS_MARKER = "./eval/run.sh"
BUILD_MARKER = "./compile.sh"
PLUGIN_SOURCE = Path(__file__).with_name("results_guard_plugin.py")
# Bytes of each stream of the two eval steps that run the submission's code (compile.sh, and
# run.sh's tests of the program) that leave the container: the rest is counted and dropped in
# the container, so a flood of output never reaches the official CLI (which holds each
# step's output in memory and writes it into eval.json). The verdict never rides on it: the
# results come by docker cp.
STEP_OUTPUT_CAP = 1 << 20


def _cut(stream: str) -> str:
    return (f"{{ head -c {STEP_OUTPUT_CAP}; n=$(wc -c); [ \"$n\" -eq 0 ] || "
            f"printf '\\n[harness: %s more bytes of {stream} cut]\\n' \"$n\"; }}")


# ``bash -lc PREFIX + command + SUFFIX``: the command's stdout and stderr each pass through
# _cut, apart; pipefail (outside the command, whose own pipelines keep bash's default) keeps
# the command's exit status.
CAP_PREFIX = "set -o pipefail; { { set +o pipefail\n"
CAP_SUFFIX = f"\n}} 2>&1 1>&3 3>&- | {_cut('stderr')} >&2; }} 3>&1 | {_cut('stdout')}"


def capped(command: str) -> str:
    """A ``bash -c`` command whose output leaves the container cut at STEP_OUTPUT_CAP."""
    return CAP_PREFIX + command + CAP_SUFFIX


def _exec_target(args: list[str], marker: str = RUN_TESTS_MARKER) -> tuple[int, str] | None:
    """``(index, container)`` of an ``exec`` argv that runs the eval's ``run.sh`` (or, with
    ``marker``, another step: :data:`BUILD_MARKER`)."""
    if args[:1] != ["exec"] or marker not in args[-1]:
        return None
    skip = False
    for i, arg in enumerate(args[1:], start=1):
        if skip:
            skip = False
        elif arg in VALUE_FLAGS:
            skip = True
        elif not arg.startswith("-"):
            return i, arg
    return None


# The judge's pytest loads no plugin by entry point (PYTEST_DISABLE_PLUGIN_AUTOLOAD): a
# ``*.dist-info`` in the submission, found through the working directory at the head of
# sys.path, would be one. The plugins the official eval uses are loaded by the results guard
# instead (its ``pytest_plugins``: those of them the test image has).
NO_PLUGIN_AUTOLOAD = "export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 && "


ACCOUNT_KEY_NAME = "account.key"


def _feed_account_key(args: list[str], key_file: Path) -> list[str]:
    """The test-run exec reads the eval call's account key on its stdin (``exec -i``, fd 0
    this file): the results guard takes it at import, before a test runs the program, so it
    is in no command line, environment or file the program could read."""
    try:
        fd = os.open(key_file, os.O_RDONLY)
    except OSError:
        return args  # no key: the account is then not accepted (see official_eval)
    os.dup2(fd, 0)
    os.close(fd)
    target = _exec_target(args)
    flags = args[1:target[0]] if target is not None else []
    return args if "-i" in flags or "--interactive" in flags else [args[0], "-i", *args[1:]]


def guard_results(docker: str, args: list[str]) -> list[str]:
    """The test-run ``exec`` with :mod:`results_guard_plugin` loaded into its pytest: the same
    shell writes the plugin (under a random name, in a fresh ``0700`` folder) just before
    ``run.sh`` starts, so no second ``docker exec`` is needed."""
    if _exec_target(args) is None:
        return args
    try:
        source = PLUGIN_SOURCE.read_text()
    except OSError as exc:
        raise PolicyRefused(f"cannot install the results guard: {exc}") from exc
    nonce = secrets.token_hex(8)
    folder, module = f"/tmp/.hx-{nonce}", f"hx_results_guard_{nonce}"
    prefix = (f"mkdir -m 700 {folder} && printf '%s' {shlex.quote(source)} > "
              f"{folder}/{module}.py && "
              f'export PYTHONPATH="{folder}${{PYTHONPATH:+:$PYTHONPATH}}" && '
              f"{NO_PLUGIN_AUTOLOAD}{judge_prefix()}"
              f'export PYTEST_ADDOPTS="${{PYTEST_ADDOPTS:-}} -p {module}" && ')
    return [*args[:-1], capped(prefix + args[-1])]


def build_as_program_user(args: list[str], log: str | None) -> list[str]:
    """The build's ``exec`` (``bash -lc ... ./compile.sh``) as the program user, its output
    capped; the same exec first makes the user, its home and the workspace its own (as
    root)."""
    if len(args) < 4 or args[-2] != "-lc" or _exec_target(args, BUILD_MARKER) is None:
        return args
    _log(log, {"op": "exec", "build_user": PROGRAM_UID})
    shell = [args[-3], "-lc", capped(args[-1])]
    return [args[0], *build_exec_flags(), *args[1:-3], *build_command(shell)]


SWEEP_LIMIT = 5000  # paths removed by name; more, and the container's own find does it


def _program_files(docker: str, container: str, log: str | None) -> list[str]:
    """What the program user owns outside its workspace and home (see
    :func:`~benchmarks.programbench.program_user.sweep_script`): listed from the container's
    upper layer on this host (only what the build changed, names and ``lstat``), else by a
    ``find`` in the container, which then removes them itself (returns [] for the caller)."""
    layers = _layers(docker, container)
    found = program_files_in_layer(layers[0], SWEEP_LIMIT) if layers else None
    if found is None:
        out = _exec_in(docker, container, ["sh", "-c", sweep_script()], 300)
        gone = [p for p in out.decode(errors="surrogateescape").split("\0") if p]
        _log(log, {"op": "sweep", "swept": [_shown(p) for p in gone][:50], "by": "find"})
        return []
    _log(log, {"op": "sweep", "swept": [_shown(p) for p in found][:50], "by": "layer"})
    return found


def _container_running(docker: str, container: str) -> bool | None:
    try:
        proc = subprocess.run([docker, "inspect", "--type", "container", "--format",
                               "{{.State.Running}}", container], capture_output=True,
                              timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    answer = proc.stdout.strip() if proc.returncode == 0 else b""
    return {b"true": True, b"false": False}.get(answer)


def _refuse(log: str | None, reason: str) -> NoReturn:
    _log(log, {"op": "commit", "refused": reason})
    print(reason, file=sys.stderr)
    sys.exit(REFUSED_RC)


def _checked_commit(docker: str, new: list[str], container: str, layers: tuple[str, list[str]]
                    | None, removed: list[str], log: str | None, started: float) -> int:
    """Check the build (``container`` is paused, or not running) and commit it: the exit
    status of ``docker commit``, or exit :data:`REFUSED_RC` when the build steers."""
    tampered, source = check_build(docker, container, layers)
    if tampered:
        _refuse(log, f"{BUILD_TAMPER_MARKER}: {', '.join(_shown(p) for p in tampered[:20])}")
    positional = [a for a in new[1:] if not a.startswith("-")]
    _log(log, {"op": "commit", "image": positional[1] if len(positional) > 1 else "",
               "build_files_removed": [_shown(p) for p in removed], "changes_from": source})
    if log:  # the committed image carries the call's label too (see sweep)
        new = [new[0], "--change", f"LABEL {LABEL_KEY}={Path(log).parent.name}", *new[1:]]
    _log(log, {"op": "commit_checked", "took_s": round(time.monotonic() - started, 3)})
    # docker commit leaves a paused container paused (it pauses only a running one)
    proc = subprocess.run([docker, *new], stdin=subprocess.DEVNULL, capture_output=True,
                          check=False)
    sys.stdout.buffer.write(proc.stdout)
    sys.stderr.buffer.write(proc.stderr)
    return proc.returncode


def _commit(docker: str, new: list[str], log: str | None, started: float) -> NoReturn:
    """Remove the build's overrides, then, the container paused from its check until the
    commit is made (a process the build left running writes nothing in between), refuse a
    build that steers the tests, or commit it. Exits with the commit's status."""
    from benchmarks.programbench.layer_changes import PauseFailed, paused

    positional = [a for a in new[1:] if not a.startswith("-")]
    container = positional[0] if positional else ""
    if not container:
        os.execv(docker, [docker, *new])
    # while it runs: docker exec (the removal) cannot run in a paused container; anything
    # made again after it is an override the check below finds. The listing's exec first
    # ends every process of the program user, so nothing of the build writes after it.
    removed = build_overrides(docker, container, prelude=end_program_script())
    swept = _program_files(docker, container, log)
    paths = [p for p in (*removed, *swept) if p.startswith("/")]
    if paths:
        subprocess.run([docker, "exec", "-u", "0", container, "rm", "-rf", "--", *paths],
                       capture_output=True, timeout=300, check=False)
    try:
        with paused(docker, container) as layers:
            status = _checked_commit(docker, new, container, layers, removed, log, started)
    except PauseFailed:
        if _container_running(docker, container) is not False:
            # an engine without a freezer: no check here could stand for what is committed
            _refuse(log, f"docker policy: {PAUSE_FAILED[1:-1]}")
        # not running: no process of the build is left to write
        status = _checked_commit(docker, new, container, _layers(docker, container), removed,
                                 log, started)
    sys.exit(status)


def _or_refuse(log: str | None, make: Callable[[], list[str]]) -> list[str]:
    """``make()``'s argv, or the exec refused (logged, exit :data:`REFUSED_RC`)."""
    try:
        return make()
    except PolicyRefused as exc:
        _log(log, {"op": "exec", "refused": str(exc)})
        print(f"docker policy: refused: {exc}", file=sys.stderr)
        sys.exit(REFUSED_RC)


def main(argv: list[str]) -> NoReturn:
    """``docker_policy --docker REAL [--log FILE] -- ARGS...``"""
    started = time.monotonic()
    sep = argv.index("--") if "--" in argv else len(argv)
    opts, args = argv[:sep], argv[sep + 1 :]
    docker = opts[opts.index("--docker") + 1]
    log = opts[opts.index("--log") + 1] if "--log" in opts else None
    try:
        new = rewrite(args, Path(log).parent.name if log else None)
    except PolicyRefused as exc:
        _log(log, {"op": args[0] if args else "", "refused": str(exc)})
        print(f"docker policy: refused: {exc}", file=sys.stderr)
        sys.exit(REFUSED_RC)
    sub = new[1] if new[:1] == ["container"] and len(new) > 1 else (new[0] if new else "")
    if sub in CREATE_COMMANDS:
        proc = subprocess.run([docker, *new], stdin=subprocess.DEVNULL, capture_output=True,
                              check=False)
        sys.stdout.buffer.write(proc.stdout)
        sys.stderr.buffer.write(proc.stderr)
        _log(log, {"op": sub, "network": "none", "image": image_of(new),
                   "id": proc.stdout.decode(errors="replace").strip(),
                   "took_s": round(time.monotonic() - started, 3)})
        sys.exit(proc.returncode)
    elif _exec_target(new) is not None:
        new = _or_refuse(log, lambda: guard_results(docker, new))
        _log(log, {"op": "exec", "results_guard": True,
                   "took_s": round(time.monotonic() - started, 3)})
        if log is not None:
            new = _feed_account_key(new, Path(log).with_name(ACCOUNT_KEY_NAME))
    elif _exec_target(new, BUILD_MARKER) is not None:
        new = build_as_program_user(new, log)
    elif sub == "commit" and len(new) >= 2:
        _commit(docker, new, log, started)
    os.execv(docker, [docker, *new])


def sweep(docker: str, label: str) -> int:
    """Remove the containers and images of one eval call left behind (a CLI stopped between
    ``docker run`` and learning the id cannot remove them itself). Returns how many."""
    gone = 0
    selector = ["--filter", f"label={LABEL_KEY}={label}"]
    listings: list[tuple[subprocess.Popen[str], list[str]]] = []
    for listing, remove in ((["ps", "-aq"], ["rm", "-f"]), (["images", "-q"], ["rmi", "-f"])):
        try:  # both listings at once: most calls find nothing
            listings.append((subprocess.Popen([docker, *listing, *selector], text=True,
                                              stdout=subprocess.PIPE,
                                              stderr=subprocess.DEVNULL), remove))
        except OSError:
            continue
    for proc, remove in listings:  # containers first: an image in use cannot go
        try:
            ids = set(proc.communicate(timeout=60)[0].split())
            if ids:
                subprocess.run([docker, *remove, *sorted(ids)], capture_output=True,
                               timeout=300, check=False)
                gone += len(ids)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
            continue
    return gone


# The sub-commands the policy decides on; every other call goes straight to the real docker.
POLICY_CASES = "run|create|commit|container|network|-*"


def install(folder: Path, *, docker: str | None = None) -> tuple[Path, Path]:
    """Write the wrapper script (and an empty log) into ``folder``: ``(wrapper, log)``.

    The wrapper is ``sh``: a call the policy passes through unchanged never starts Python
    (``exec`` of the real docker); the others start this module with ``-S`` (no site
    packages to scan: it needs the standard library only, until a ``commit``)."""
    real = docker or shutil.which("docker")
    if not real:
        raise FileNotFoundError("no docker CLI on PATH for the eval's docker policy")
    folder.mkdir(parents=True, exist_ok=True)
    wrapper, log = folder / WRAPPER_NAME, folder / LOG_NAME
    log.write_text("")
    key = folder / ACCOUNT_KEY_NAME  # on this host only: see _feed_account_key
    key.write_text(secrets.token_hex(16) + "\n")
    key.chmod(0o600)
    real_q = shlex.quote(str(Path(real).resolve()))
    argv = [sys.executable, "-S", "-m", "benchmarks.programbench.docker_policy", "--docker",
            str(Path(real).resolve()), "--log", str(log), "--"]
    wrapper.write_text(
        "#!/bin/sh\n"
        f'case "${{1-}}" in\n'
        f"  {POLICY_CASES}) ;;\n"
        # the two steps that run the submission's code: the build (compile.sh, as the
        # program user, its output capped) and the tests (run.sh, under the results guard)
        '  exec) for last; do :; done\n'
        f'        case "$last" in *{RUN_TESTS_MARKER}*|*{BUILD_MARKER}*) ;; *)\n'
        f'          exec {real_q} "$@" ;; esac ;;\n'
        f'  *) exec {real_q} "$@" ;;\n'
        "esac\n"
        f"PYTHONPATH={shlex.quote(str(REPO_ROOT))}${{PYTHONPATH:+:$PYTHONPATH}} "
        f"exec {' '.join(shlex.quote(a) for a in argv)} \"$@\"\n"
    )
    wrapper.chmod(0o755)
    return wrapper, log


if __name__ == "__main__":
    main(sys.argv[1:])
