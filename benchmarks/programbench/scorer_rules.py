"""The scorer guard's rules, standard library only: which root entries of a submission steer
the official eval's pytest, and how ``setup.cfg``/``pyproject.toml`` lose their pytest
sections (see :mod:`benchmarks.programbench.scorer_guard`).

Kept apart so the eval's docker policy, a process per docker call, applies the same rules to
what a build wrote without importing pydantic.
"""

from __future__ import annotations

import re
import sys
import tomllib
from typing import Literal

ROOT_PYTEST_FILES = frozenset(
    {"conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini"}
)
RESERVED_DIR = "eval"
EDITED_CONFIGS = ("setup.cfg", "pyproject.toml")
MAX_CONFIG_BYTES = 1 << 20
# Modules the eval's pytest imports by name, beyond the standard library.
PYTEST_MODULES = frozenset(
    {
        "pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging", "exceptiongroup",
        "tomli", "attr", "attrs", "pygments", "colorama", "xdist", "execnet", "pytest_timeout",
        "pytest_rerunfailures", "pytest_xdist", "programbench_pytest_timeout", "sitecustomize",
        "usercustomize", "conftest", "typing_extensions",
    }
)
SHADOW_NAMES = frozenset(sys.stdlib_module_names) | PYTEST_MODULES
# The top-level modules of the clean room's /usr/lib/python3/dist-packages (Debian's pytest
# and what it and its plugins import): a module of the same name earlier on sys.path
# (/usr/local/lib/python3.X/dist-packages, the user site) replaces one of them in the scorer.
SITE_SHADOW_NAMES = SHADOW_NAMES | frozenset(
    {
        "importlib_metadata", "more_itertools", "pkg_resources", "zipp", "setuptools",
        "_distutils_hack", "distutils", "pytest_asyncio", "pytest_cov", "coverage", "hypothesis",
        "_hypothesis_pytestplugin", "pytest_mock", "pytest_forked", "pexpect", "ptyprocess",
    }
)
_MODULE_FILE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\.py|\.pyc|\.pyw|(\.[A-Za-z0-9_-]+)?\.so)$")
_INIT_FILE = re.compile(r"^__init__(\.py|\.pyc|(\.[A-Za-z0-9_-]+)?\.so)$")

Reason = Literal[
    "pytest_config",
    "reserved_eval_dir",
    "shadows_module",
    "unsafe_path",
    "below_symlink",
    "link_to_removed",
    "pytest_config_unstrippable",
]


def root_reason(parts: list[str]) -> Reason | None:
    top = parts[0]
    if top in ROOT_PYTEST_FILES:
        return "pytest_config"
    if top == RESERVED_DIR:
        return "reserved_eval_dir"
    if len(parts) == 1:
        match = _MODULE_FILE.match(top)
        if match and match.group(1) in SHADOW_NAMES:
            return "shadows_module"
    elif len(parts) == 2 and top in SHADOW_NAMES and _INIT_FILE.match(parts[1]):
        return "shadows_module"
    return None


def strip_setup_cfg(text: str) -> str | None:
    """``setup.cfg`` without ``[tool:pytest]``/``[pytest]``; None when pytest could still
    read a section of its own, or could not parse the file (either aborts or steers it)."""
    import iniconfig

    out: list[str] = []
    skipping = False
    for line in text.splitlines(keepends=True):
        if line.startswith("["):
            name = line.strip().split("]", 1)[0].lstrip("[").strip()
            skipping = name in ("tool:pytest", "pytest")
        if not skipping:
            out.append(line)
    result = "".join(out)
    try:
        parsed = iniconfig.IniConfig("setup.cfg", data=result)
    except Exception:
        return None
    if "tool:pytest" in parsed or "pytest" in parsed:
        return None
    return result


_TOML_HEADER = re.compile(r"^\s*\[\[?(.+?)\]\]?\s*(#.*)?$")


def strip_pyproject(text: str) -> str | None:
    """``pyproject.toml`` without its ``[tool.pytest...]`` tables; None when it does not
    parse, or still configures pytest (dotted keys, inline tables)."""
    out: list[str] = []
    skipping = False
    for line in text.splitlines(keepends=True):
        header = _TOML_HEADER.match(line)
        if header:
            key = re.sub(r"[\s\"']", "", header.group(1))
            skipping = key == "tool.pytest" or key.startswith("tool.pytest.")
        if not skipping:
            out.append(line)
    result = "".join(out)
    try:
        data = tomllib.loads(result)
    except (tomllib.TOMLDecodeError, UnicodeError):
        return None
    tool = data.get("tool")
    if isinstance(tool, dict) and "pytest" in tool:
        return None
    return result


def edit_config(name: str, data: bytes) -> bytes | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    stripped = strip_setup_cfg(text) if name == "setup.cfg" else strip_pyproject(text)
    return None if stripped is None else stripped.encode("utf-8")
