"""The layer contract: imports only run down, and no module imports itself round a loop.

The layers of the project, bottom to top (a name covers its module and everything under
it; names on one line are siblings, which do not import each other):

    harness.core (and the package face ``harness``)
    harness.run
    harness.sandbox
    harness.budget | harness.model_proxy
    harness.agents
    harness.runner
    harness.cli | harness.testing
    reports
    benchmarks

Every import counts, wherever it stands and whatever its form (inside a function, under
``if TYPE_CHECKING``, ``importlib.import_module("...")``, a module table of names loaded by
``import_module``, a package's lazy export table): see :mod:`tests.support.import_graph`.
Some imports are never allowed (:data:`FORBIDDEN`: the harness imports no benchmark and no
report; nothing outside ``harness.testing`` imports a test double), and a benchmark reaches
the harness only through its public module, ``harness.api`` (issue 42), and reaches no
other benchmark.

A failure prints each offending import as ``file:line importer -> imported: rule``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.import_graph import Graph, Import

LAYERS: list[tuple[str, ...]] = [
    ("harness.core",),
    ("harness.run",),
    ("harness.sandbox",),
    ("harness.budget", "harness.model_proxy"),
    ("harness.agents",),
    ("harness.runner",),
    ("harness.cli", "harness.testing", "harness.api"),
    ("reports",),
    ("benchmarks",),
]
# The package's face (``harness/__init__.py``: the version and nothing else) sits with core.
FACES = {"harness": "harness.core"}

# Never, whatever the layers say: (importer prefix, imported prefix, why). "" is any module.
FORBIDDEN: list[tuple[str, str, str]] = [
    ("harness", "benchmarks", "the core knows no benchmark (it finds them by entry point)"),
    ("harness", "reports", "the core knows no report (it finds it by entry point)"),
    ("", "harness.testing", "a test double is reachable only where a test loads it"),
]

# Imports that break the contract and are being fixed by name: {(importer, imported): why},
# {frozenset(the cycle's modules): why}. Each says why; an exception that no longer occurs
# fails test_every_exception_is_still_needed. None today: the last three (run.resume ->
# sandbox.client, agents.gateway.reattach -> runner.*, agents.command <-> command_proxy)
# were fixed by issue 25.
EXCEPTIONS: dict[tuple[str, str], str] = {}
CYCLE_EXCEPTIONS: dict[frozenset[str], str] = {}

# The harness modules a benchmark adapter may import (docs/adapters.md). Today's set,
# written out: a new one is a decision, made here and in the doc.
# Every package under ``benchmarks`` (issue 42): the whole of what it imports from the
# harness is its public module.
BENCHMARK_PACKAGES: tuple[str, ...] = ("benchmarks.cowork_bench", "benchmarks.harbor",
                                       "benchmarks.programbench")
PUBLIC_MODULE = "harness.api"


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str) -> tuple[int, str] | None:
    """(layer index, the layer's name that covers ``module``), the longest name winning."""
    module = FACES.get(module, module)
    best: tuple[int, str] | None = None
    for index, names in enumerate(LAYERS):
        for name in names:
            if _under(module, name) and (best is None or len(name) > len(best[1])):
                best = (index, name)
    return best


def layer_breaks(imports: list[Import]) -> list[tuple[Import, str]]:
    """Each import that runs up a layer or across to a sibling, with the rule it breaks."""
    out: list[tuple[Import, str]] = []
    for imp in imports:
        here, there = layer_of(imp.importer), layer_of(imp.imported)
        if here is None or there is None:
            continue
        if there[0] > here[0]:
            out.append((imp, f"upward: {here[1]} (layer {here[0]}) is below "
                             f"{there[1]} (layer {there[0]})"))
        elif there[0] == here[0] and there[1] != here[1]:
            out.append((imp, f"sideways: siblings {here[1]} and {there[1]} do not import "
                             "each other"))
    return out


def forbidden_breaks(imports: list[Import]) -> list[tuple[Import, str]]:
    return [(imp, f"forbidden: {why}") for imp in imports
            for source, target, why in FORBIDDEN
            if (not source or _under(imp.importer, source)) and _under(imp.imported, target)
            and not _under(imp.importer, target)]


def public_module_breaks(imports: list[Import]) -> list[tuple[Import, str]]:
    """Each import of a benchmark that reaches the harness past its public module, or
    another benchmark."""
    out = []
    for imp in imports:
        if not _under(imp.importer, "benchmarks"):
            continue
        mine = ".".join(imp.importer.split(".")[:2])  # benchmarks.<name>
        if _under(imp.imported, "harness") and imp.imported != PUBLIC_MODULE:
            out.append((imp, f"a benchmark imports only {PUBLIC_MODULE}"))
        elif _under(imp.imported, "benchmarks") and not _under(imp.imported, mine):
            out.append((imp, "a benchmark imports no other benchmark"))
    return out


def describe(imp: Import, rule: str) -> str:
    form = [w for w, on in (("inside a function", imp.in_function),
                            ("under TYPE_CHECKING", imp.type_only),
                            (f"by {imp.how}", imp.how != "import")) if on]
    return (f"{imp.where} {imp.importer} -> {imp.imported}: {rule}"
            + (f" [{', '.join(form)}]" if form else ""))


@pytest.fixture(scope="module")
def graph() -> Graph:
    return Graph()


def test_imports_only_run_down_the_layers(graph: Graph) -> None:
    assert len(graph.files) > 150  # the whole tree was read
    breaks = [describe(imp, rule) for imp, rule in layer_breaks(graph.imports)
              if (imp.importer, imp.imported) not in EXCEPTIONS]
    assert not breaks, "imports against the layer contract:\n" + "\n".join(breaks)


def test_no_forbidden_import(graph: Graph) -> None:
    breaks = [describe(imp, rule) for imp, rule in forbidden_breaks(graph.imports)]
    assert not breaks, "forbidden imports:\n" + "\n".join(breaks)


def test_no_import_cycle(graph: Graph) -> None:
    found = [c for c in graph.cycles() if frozenset(c) not in CYCLE_EXCEPTIONS]
    lines = []
    for group in found:
        lines.append("cycle: " + " <-> ".join(group))
        members = set(group)
        lines += ["  " + describe(imp, "in the cycle") for imp in graph.imports
                  if imp.importer in members and imp.imported in members]
    assert not found, "import cycles:\n" + "\n".join(lines)


def test_benchmarks_import_only_the_public_module(graph: Graph) -> None:
    for package in BENCHMARK_PACKAGES:  # each was read
        assert any(_under(f, package) for f in graph.files), package
    breaks = [describe(imp, rule) for imp, rule in public_module_breaks(graph.imports)]
    assert not breaks, "imports past harness.api:\n" + "\n".join(breaks)


def test_the_public_module_rule_catches_a_benchmark_reaching_past_it() -> None:
    def imp(importer: str, imported: str) -> Import:
        return Import(importer, imported, importer.replace(".", "/") + ".py", 3,
                      in_function=True, type_only=False, how="import")

    [(_, rule)] = public_module_breaks([imp("benchmarks.harbor.x", "harness.runner.trial")])
    assert rule.endswith("imports only harness.api")
    [(_, rule)] = public_module_breaks([imp("benchmarks.programbench.x", "harness.sandbox")])
    assert rule.endswith("imports only harness.api")
    [(_, rule)] = public_module_breaks([imp("benchmarks.harbor.x", "benchmarks.programbench.a")])
    assert "no other benchmark" in rule
    assert public_module_breaks([imp("benchmarks.harbor.x", "harness.api"),
                                 imp("benchmarks.harbor.x", "benchmarks.harbor.tasks"),
                                 imp("harness.runner.x", "harness.runner.worker")]) == []


def test_every_exception_is_still_needed(graph: Graph) -> None:
    pairs = {(imp.importer, imp.imported) for imp, _ in layer_breaks(graph.imports)}
    gone = [f"{a} -> {b}" for a, b in EXCEPTIONS if (a, b) not in pairs]
    cycles = {frozenset(c) for c in graph.cycles()}
    gone += [" <-> ".join(sorted(c)) for c in CYCLE_EXCEPTIONS if c not in cycles]
    assert not gone, ("fixed: remove these from EXCEPTIONS / CYCLE_EXCEPTIONS in "
                      f"tests/test_layers.py: {gone}")


def test_every_project_module_has_a_layer(graph: Graph) -> None:
    assert [m for m in graph.files if layer_of(m) is None] == []


# The checker itself: each form of import is seen, and a break is reported with its place.

PROBES = {
    "hidden behind import_module": (
        "import importlib\n\ndef f():\n    importlib.import_module('pkg.low.b')\n",
        "from pkg.low import a\n"),
    "in a function": ("def f():\n    from pkg.low import b\n", "import pkg.low.a\n"),
    "under TYPE_CHECKING": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                            "    from pkg.low.b import X\n", "from . import a\n"),
    "a table of module names": (
        "import importlib\nKINDS = {'x': 'pkg.low.b'}\n\n"
        "def make(kind):\n    return importlib.import_module(KINDS[kind])\n",
        "from .a import Y\n"),
    "__import__": ("__import__('pkg.low.b')\n", "from pkg.low.a import Y\n"),
}


@pytest.mark.parametrize("form", PROBES)
def test_the_checker_sees_a_cycle_in_every_form(tmp_path: Path, form: str) -> None:
    a_source, b_source = PROBES[form]
    low = tmp_path / "pkg" / "low"
    low.mkdir(parents=True)
    for init in (tmp_path / "pkg" / "__init__.py", low / "__init__.py"):
        init.write_text("")
    (low / "a.py").write_text(a_source)
    (low / "b.py").write_text(b_source)
    g = Graph(packages=("pkg",), root=tmp_path)
    assert g.cycles() == [["pkg.low.a", "pkg.low.b"]]
    hidden = next(imp for imp in g.imports if imp.importer == "pkg.low.a")
    assert hidden.imported == "pkg.low.b" and hidden.where.startswith("pkg/low/a.py:")


def test_the_checker_follows_a_lazy_export_table(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "from harness.core.lazy import lazy_exports\n_LAZY = {'Thing': 'pkg.deep'}\n"
        "__getattr__ = lazy_exports(__name__, _LAZY)\n")
    (pkg / "deep.py").write_text("Thing = 1\n")
    (pkg / "user.py").write_text("def f():\n    from pkg import Thing\n")
    g = Graph(packages=("pkg",), root=tmp_path)
    edges = {(imp.importer, imp.imported, imp.how, imp.in_function) for imp in g.imports}
    assert ("pkg.user", "pkg.deep", "lazy", True) in edges  # the name's module, not the face
    assert ("pkg", "pkg.deep", "lazy", False) in edges


def test_an_upward_import_is_reported_with_its_place_and_rule() -> None:
    imp = Import("harness.run.manifest", "harness.agents.provenance", "harness/run/manifest.py",
                 51, in_function=True, type_only=False, how="import")
    [(found, rule)] = layer_breaks([imp])
    assert found is imp and rule.startswith("upward: harness.run (layer 1)")
    assert describe(found, rule).startswith(
        "harness/run/manifest.py:51 harness.run.manifest -> harness.agents.provenance: upward")
    sideways = Import("harness.budget.x", "harness.model_proxy.y", "harness/budget/x.py", 3,
                      in_function=False, type_only=False, how="import")
    assert layer_breaks([sideways])[0][1].startswith("sideways")
    down = Import("benchmarks.x", "harness.api", "benchmarks/x.py", 1,
                  in_function=False, type_only=False, how="import")
    assert layer_breaks([down]) == []
    assert public_module_breaks([down]) == [] and forbidden_breaks([down]) == []
    fake = Import("reports.x", "harness.testing.fake_meter", "reports/x.py", 7,
                  in_function=True, type_only=False, how="import")
    assert forbidden_breaks([fake])[0][1].startswith("forbidden: a test double")
    assert layer_breaks([fake]) == []  # the layers alone would let the report reach it
    assert public_module_breaks([Import("benchmarks.x", "harness.core.models", "benchmarks/x.py",
                                        1, in_function=False, type_only=False, how="import")])
