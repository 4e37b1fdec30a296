"""Start-up of a pytest session that holds benchmarks: a folder that contains benchmark
folders (``pytest benchmarks``, or ``pytest`` in the repository root, whose ``testpaths`` is
``benchmarks``) loads their conftests before the command line is parsed, as pytest does for
``test*`` folders; and a session that lost its project's configuration because an option's
value was taken for a path is refused. A pytest plugin of the runner (``harness.runner.plugin``
loads it: it must be registered before ``pytest_load_initial_conftests``)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

# Set when pytest lost the project's configuration (see :func:`lost_config`); the runner's
# pytest_configure refuses the session with it (exit 2).
LOST_CONFIG_KEY: pytest.StashKey[str] = pytest.StashKey()
# pytest's configuration files, and the section that makes one count (None: any content).
CONFIG_FILES = (("pytest.ini", None), (".pytest.ini", None), ("pyproject.toml", "[tool.pytest"),
                ("tox.ini", "[pytest]"), ("setup.cfg", "[tool:pytest]"))


def project_config(here: Path) -> Path | None:
    """The pytest configuration file that ``pytest`` run in ``here`` would read."""
    for folder in (here, *here.parents):
        for name, section in CONFIG_FILES:
            path = folder / name
            if not path.is_file():
                continue
            try:
                if section is None or section in path.read_text(errors="replace"):
                    return path
            except OSError:
                continue
    return None


def lost_config(early_config: pytest.Config, args: list[str]) -> str | None:
    """pytest finds its configuration from the paths on the command line before any plugin
    has added its options: from the project's root, ``pytest --resume-from /elsewhere/RUN``
    makes RUN the rootdir and leaves the project's pyproject.toml unread (no testpaths: the
    whole project, its own tests included, would be collected). The one-line refusal names
    the option and the fix; None when the configuration was found."""
    if early_config.inipath is not None:
        return None
    here = early_config.invocation_params.dir
    found = project_config(here)
    if found is None:
        return None
    positional = {str(a) for a in early_config.known_args_namespace.file_or_dir or []}
    suspects: list[tuple[str, str]] = []
    for flag, word in itertools.pairwise(args):
        if flag.startswith("--") and "=" not in flag and not word.startswith("-") \
                and word not in positional and (here / word).exists():
            suspects.append((flag, word))
    if not suspects:
        return None
    root = early_config.rootpath

    def misled(word: str) -> bool:
        path = (here / word).resolve()
        return root in (path, path.parent)

    flag, word = next((s for s in suspects if misled(s[1])), suspects[0])
    return (f"{flag} {word}: pytest read that path before it knew {flag}, took it for one to "
            f"collect and so did not read {found}; write {flag}={word} as one word, or name "
            f"what to run first (e.g. pytest benchmarks {flag} {word})")


def benchmark_dirs() -> list[Path]:
    """The folders of the registered benchmarks (where their conftest.py lives), found
    without importing their modules."""
    import importlib.util

    from harness.core.registry import benchmark_entries

    out: list[Path] = []
    for value in benchmark_entries().values():
        module = value.partition(":")[0]
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.origin:
            folder = Path(spec.origin).parent
            if (folder / "conftest.py").is_file():
                out.append(folder.resolve())
    return out


def option_values(args: list[str], parser: pytest.Parser) -> set[str]:
    """Words that follow an option pytest does not know yet (a benchmark's own, such as
    ``--cowork-root PATH``, before its conftest is loaded): values, not paths to collect."""
    _, unknown = parser.parse_known_and_unknown_args(list(args))
    flags = {u for u in unknown if u.startswith("--") and "=" not in u}
    return {args[i + 1] for i, word in enumerate(args[:-1]) if word in flags}


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser,
                                  args: list[str]) -> Any:
    """A folder that holds benchmarks (``pytest benchmarks``, or the repository root whose
    ``testpaths`` is ``benchmarks``) loads their conftests up front, as pytest does for
    ``test*`` folders: their options (``--cowork-root``, ``--pb-fixtures``) parse and their
    adapters exist when the run is planned."""
    lost = lost_config(early_config, args)
    if lost is not None:
        early_config.stash[LOST_CONFIG_KEY] = lost
        return (yield)
    ns = early_config.known_args_namespace
    if ns.pyargs or ns.noconftest:
        return (yield)
    given = list(ns.file_or_dir or [])
    values = option_values(args, parser) if given else set()
    paths = [a for a in given if a not in values]
    here = early_config.invocation_params.dir
    if paths:
        initial = paths
    elif here == early_config.rootpath and early_config.getini("testpaths"):
        initial = list(early_config.getini("testpaths"))
    else:
        initial = [str(here)]
    folders = [(here / str(a).split("::", 1)[0]).resolve() for a in initial]
    folders = [f for f in folders if f.is_dir()]
    extra = [str(b) for b in (benchmark_dirs() if folders else [])
             if any(b != f and f in b.parents for f in folders)]
    if not extra:
        return (yield)
    ns.file_or_dir = [*initial, *extra]
    try:
        return (yield)
    finally:
        ns.file_or_dir = given
