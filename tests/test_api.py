"""The public module ``harness.api`` (issue 42) and every lazy export table in the harness:
the names the type checker sees (the ``TYPE_CHECKING`` block) are the names loaded on first
use (the table), each resolves to what the type checker was told, and importing the public
module loads neither pydantic's models nor Docker."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAZY_MODULES = ["harness.api", "harness.sandbox", "harness.agents", "harness.budget"]


def type_checking_names(module: str) -> dict[str, tuple[str, str]]:
    """exported name -> (module, attribute) of the module's ``if TYPE_CHECKING:`` imports."""
    path = Path(importlib.import_module(module).__file__ or "")
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: dict[str, tuple[str, str]] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module, ast.dump(imp)
                source = (importlib.util.resolve_name("." * imp.level + imp.module, package)
                          if imp.level else imp.module)
                for alias in imp.names:
                    out[alias.asname or alias.name] = (source, alias.name)
    return out


def lazy_table(module: str) -> dict[str, tuple[str, str]]:
    table = importlib.import_module(module)._LAZY
    out = {}
    for name, where in table.items():
        source, _, attr = where.partition(":")
        out[name] = (source, attr or name)
    return out


@pytest.mark.parametrize("module", LAZY_MODULES)
def test_the_lazy_table_is_the_type_checkers_list(module: str) -> None:
    seen, table = type_checking_names(module), lazy_table(module)
    assert seen, f"{module}: no TYPE_CHECKING imports read"
    missing = sorted(set(seen) - set(table))
    extra = sorted(set(table) - set(seen))
    moved = sorted(n for n in set(seen) & set(table) if seen[n] != table[n])
    assert not (missing or extra or moved), (
        f"{module}: typed but not loaded {missing}; loaded but not typed {extra}; "
        f"from another place {moved}")


@pytest.mark.parametrize("module", LAZY_MODULES)
def test_every_lazy_name_resolves(module: str) -> None:
    mod = importlib.import_module(module)
    for name, (source, attr) in lazy_table(module).items():
        assert getattr(mod, name) is getattr(importlib.import_module(source), attr), name


def test_an_unknown_name_is_an_attribute_error() -> None:
    import harness.api

    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        _ = harness.api.Nope  # type: ignore[attr-defined]


def test_importing_the_public_module_loads_no_models_no_docker_and_no_runner() -> None:
    """ProgramBench's Docker policy runs in the scorer's interpreter (no pytest): it takes a
    file helper from the public module, which must not bring the runner along."""
    probe = ("import sys, harness.api; from harness.api import read_capped; "
             "print(sorted(m for m in sys.modules if m in ('docker', 'pytest', "
             "'harness.core.models', 'harness.core.row_details', 'harness.runner.trial', "
             "'harness.agents.gateway.models') or m.startswith('pydantic.main')))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout
