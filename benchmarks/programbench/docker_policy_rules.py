"""Which change of a build steers the tests' pytest: the paths of Python, pytest and its
plugins, the user site, the tests' PATH and the login shell's files (:data:`TAMPER_SCOPE`),
the order of the image's ``sys.path`` (a module added ahead of one the scorer imports), and
the workspace's overrides (:func:`workspace_override`, an edited config). Pure rules over
paths: :mod:`~benchmarks.programbench.docker_policy_checks` reads the changes they judge.
Standard library only at import (the policy starts with ``-S``).
"""

from __future__ import annotations

import sys
from typing import Any

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
