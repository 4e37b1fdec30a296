"""No product module rewrites the process environment (issue 42): what a client or a
subprocess needs (a placed instance's engine, a program's settings) is handed to it
explicitly (``environment=``, ``env=``). An AST scan of ``harness/``, ``benchmarks/`` and
``reports/`` for ``os.environ[...] = ...``, ``del os.environ[...]``, ``os.environ = ...``,
``os.environ.update/pop/popitem/setdefault/clear(...)``, ``os.putenv``/``os.unsetenv``
(also through ``from os import environ``); the exceptions are listed with their reason."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("harness", "benchmarks", "reports")
MUTATORS = frozenset({"update", "pop", "popitem", "setdefault", "clear", "__setitem__",
                      "__delitem__"})

# path -> why it may change os.environ (each must still do so: a stale entry fails too).
ALLOWED = {
    "harness/agents/mini_swe.py":
        "LITELLM_LOCAL_MODEL_COST_MAP and MSWEA_SILENT_STARTUP are read from the process "
        "environment by litellm and mini-swe-agent when they are imported (setdefault: never "
        "over the user's value; no Docker variable)",
    "benchmarks/programbench/results_guard_plugin.py":
        "runs in the scorer's pytest inside the eval container, in the process about to exec "
        "a program as the program user: exec* without an env argument passes os.environ on",
}


def _environ_names(tree: ast.AST) -> set[str]:
    """Local names bound to ``os.environ`` by ``from os import environ [as x]``."""
    return {alias.asname or alias.name for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "os"
            for alias in node.names if alias.name == "environ"}


def _is_environ(node: ast.AST, names: set[str]) -> bool:
    if isinstance(node, ast.Attribute) and node.attr == "environ":
        return isinstance(node.value, ast.Name) and node.value.id == "os"
    return isinstance(node, ast.Name) and node.id in names


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    if isinstance(node, ast.Delete):
        return list(node.targets)
    return []


def rewrites(source: str, name: str = "<source>") -> list[str]:
    """``name:line what`` for every change of ``os.environ`` in ``source``."""
    tree = ast.parse(source, filename=name)
    names = _environ_names(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        for target in _targets(node):
            if _is_environ(target, names) or (
                    isinstance(target, ast.Subscript) and _is_environ(target.value, names)):
                found.append(f"{name}:{target.lineno} {type(node).__name__.lower()}")
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        func = node.func
        if func.attr in MUTATORS and _is_environ(func.value, names):
            found.append(f"{name}:{node.lineno} environ.{func.attr}")
        elif func.attr in ("putenv", "unsetenv") and isinstance(func.value, ast.Name) \
                and func.value.id == "os":
            found.append(f"{name}:{node.lineno} os.{func.attr}")
    return found


@pytest.mark.parametrize("source", [
    "import os\nos.environ['DOCKER_HOST'] = 'x'\n",
    "import os\nos.environ.update({'A': '1'})\n",
    "import os\nos.environ.pop('A', None)\n",
    "import os\ndel os.environ['A']\n",
    "import os\nos.putenv('A', '1')\n",
    "import os\nos.environ.setdefault('A', '1')\n",
    "import os\nos.environ = {}\n",
    "from os import environ as e\ne['A'] = '1'\n",
    "from os import environ\nenviron.clear()\n",
    "def f():\n    import os\n    os.environ['A'] += 'x'\n",
])
def test_the_scan_finds_each_form(source: str) -> None:
    assert len(rewrites(source)) == 1, source


@pytest.mark.parametrize("source", [
    "import os\nenv = {**os.environ, 'A': '1'}\nenv['B'] = '2'\n",
    "import os\nx = os.environ.get('A')\nenv = dict(os.environ)\nenv.pop('A', None)\n",
])
def test_reading_and_copying_is_not_a_rewrite(source: str) -> None:
    assert rewrites(source) == []


def test_no_product_module_rewrites_os_environ() -> None:
    files = sorted(f for top in PRODUCT for f in (ROOT / top).rglob("*.py"))
    assert len(files) > 100
    found: dict[str, list[str]] = {}
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        hits = rewrites(path.read_text(), rel)
        if hits:
            found[rel] = hits
    offenders = [hit for rel, hits in found.items() if rel not in ALLOWED for hit in hits]
    assert offenders == [], "hand the environment over explicitly (env=, environment=)"
    assert sorted(set(ALLOWED) - set(found)) == [], "stale ALLOWED entries"
