"""What a build changed and which of its changes steer the tests: the workspace's overrides
(:func:`build_overrides`), the build container's changes read from its upper layer on this
host (:mod:`~benchmarks.programbench.layer_changes`), else from the engine's API, else
``docker diff`` (:func:`build_changes`), judged by the rules of
:mod:`~benchmarks.programbench.docker_policy_rules` (:func:`check_build`,
:func:`tampered_paths`, :func:`build_tampering`). Standard library only at import (the policy
starts with ``-S``); the engine's SDK and the layer reader load at the first check.
"""

from __future__ import annotations

import os
import subprocess
from typing import TYPE_CHECKING, Any

from benchmarks.programbench.docker_policy_rules import (
    API_KINDS,
    DIFF_KINDS,
    LAST_SITE,
    MAX_DIFF_CHECKED,
    TAMPER_SCOPE,
    WORKSPACE,
    WORKSPACE_DEPTH,
    _config_edited,
    _ensure_site,
    _on_the_way,
    _site_shadow_names,
    _steers,
    module_name,
    workspace_override,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    # (type, data) of one path of the build container: see layer_changes.look
    Look = Callable[[str, int], tuple[str, bytes | None]]


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


def _container_running(docker: str, container: str) -> bool | None:
    try:
        proc = subprocess.run([docker, "inspect", "--type", "container", "--format",
                               "{{.State.Running}}", container], capture_output=True,
                              timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    answer = proc.stdout.strip() if proc.returncode == 0 else b""
    return {b"true": True, b"false": False}.get(answer)
