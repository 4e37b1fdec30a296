"""Every import between this project's own modules, read from the source (nothing is imported).

An import counts wherever it stands and whatever its form:

* ``import a.b`` and ``from a import b`` (relative ones too), at module level, inside a
  function, a class, a ``try`` or an ``if TYPE_CHECKING`` block;
* ``importlib.import_module("a.b")`` and ``__import__("a.b")`` with a literal name;
* ``importlib.import_module(TABLE[key])`` where ``TABLE`` is a module-level dict of literal
  module names (a registry of kinds loaded on first use): every name in it;
* a package's :func:`harness.core.lazy.lazy_exports` table (``__getattr__ =
  lazy_exports(__name__, TABLE)``): the package imports every module in it, and ``from
  package import name`` imports the module that defines ``name``.

Each import is an :class:`Import`: who, whom, where (``file:line``), and whether it stands
inside a function or under ``if TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("harness", "benchmarks", "reports")


@dataclass(frozen=True)
class Import:
    importer: str  # module name, e.g. "harness.run.manifest"
    imported: str  # one of this project's modules
    path: str  # file path from the project root
    line: int
    in_function: bool
    type_only: bool  # under ``if TYPE_CHECKING``
    how: str  # "import", "import_module", "table", "lazy"

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_files(packages: Iterable[str] = PACKAGES, root: Path = ROOT) -> list[Path]:
    return sorted(p for pkg in packages for p in (root / pkg).rglob("*.py")
                  if "__pycache__" not in p.parts)


def _literal_str_dict(node: ast.AST) -> dict[str, str] | None:
    """``{"key": "value", ...}`` with literal strings only, else None."""
    if not isinstance(node, ast.Dict) or not node.values:
        return None
    out: dict[str, str] = {}
    for key, value in zip(node.keys, node.values, strict=True):
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)
                and isinstance(value, ast.Constant) and isinstance(value.value, str)):
            return None
        out[key.value] = value.value
    return out


def _module_tables(tree: ast.Module) -> dict[str, list[str]]:
    """Module-level ``NAME = {key: "literal", ...}`` (annotated too)."""
    tables: dict[str, list[str]] = {}
    for stmt in tree.body:
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign):
            target, value = stmt.target, stmt.value
        if isinstance(target, ast.Name) and value is not None:
            values = _literal_str_dict(value)
            if values is not None:
                tables[target.id] = list(values.values())
    return tables


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _call_name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


class Graph:
    """The imports among the modules of ``packages`` (others' modules are left out)."""

    def __init__(self, packages: Iterable[str] = PACKAGES, root: Path = ROOT) -> None:
        self.root = root
        self.files = {module_name(p, root): p for p in project_files(packages, root)}
        self.trees = {name: ast.parse(p.read_text(), filename=str(p))
                      for name, p in self.files.items()}
        # package -> {exported name: defining module}, from lazy_exports tables
        self.lazy: dict[str, dict[str, str]] = {}
        for name, tree in self.trees.items():
            if self.files[name].name == "__init__.py":
                table = self._lazy_table(tree)
                if table:
                    self.lazy[name] = table
        # one Import per (importer, imported, line): ``from m import a, b`` is one import of m
        self.imports: list[Import] = list(dict.fromkeys(
            imp for name in self.files for imp in self._read(name)))

    @staticmethod
    def _lazy_table(tree: ast.Module) -> dict[str, str]:
        """The table handed to ``lazy_exports`` in ``__getattr__ = lazy_exports(__name__, T)``."""
        assigned: dict[str, dict[str, str]] = {}
        for stmt in tree.body:
            if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0], ast.Name)):
                table = _literal_str_dict(stmt.value)
                if table is not None:
                    assigned[stmt.targets[0].id] = table
        for stmt in tree.body:
            if (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call)
                    and _call_name(stmt.value.func) == "lazy_exports"
                    and len(stmt.value.args) == 2 and isinstance(stmt.value.args[1], ast.Name)):
                table = assigned.get(stmt.value.args[1].id, {})
                # "module:name": a name exported under another one, from that module
                return {name: where.partition(":")[0] for name, where in table.items()}
        return {}

    def _own(self, name: str) -> str | None:
        """The longest prefix of ``name`` that is one of this project's modules."""
        while name:
            if name in self.files:
                return name
            name = name.rpartition(".")[0]
        return None

    def _targets(self, module: str, names: Iterable[str] = ()) -> Iterator[tuple[str, str]]:
        """(imported module, how) for ``import module`` / ``from module import names``."""
        names = list(names)
        if not names:
            own = self._own(module)
            if own:
                yield own, "import"
            return
        for alias in names:
            sub = f"{module}.{alias}"
            if sub in self.files:
                yield sub, "import"
            elif alias in self.lazy.get(module, {}):
                yield self.lazy[module][alias], "lazy"
            else:
                own = self._own(module)
                if own:
                    yield own, "import"

    def _read(self, importer: str) -> Iterator[Import]:
        path = self.files[importer]
        rel = str(path.relative_to(self.root))
        tree = self.trees[importer]
        tables = _module_tables(tree)
        package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]

        def emit(node: ast.AST, targets: Iterable[tuple[str, str]], in_function: bool,
                 type_only: bool) -> Iterator[Import]:
            for imported, how in targets:
                if imported != importer:
                    yield Import(importer, imported, rel, getattr(node, "lineno", 1),
                                 in_function, type_only, how)

        def visit(node: ast.AST, in_function: bool, type_only: bool) -> Iterator[Import]:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield from emit(node, self._targets(alias.name), in_function, type_only)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                yield from emit(node, self._targets(base, [a.name for a in node.names]),
                                in_function, type_only)
            elif (isinstance(node, ast.Call) and node.args
                  and _call_name(node.func) in ("import_module", "__import__")):
                arg = node.args[0]
                found: list[str] = []
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found = [arg.value]
                elif isinstance(arg, ast.Subscript) and isinstance(arg.value, ast.Name):
                    found = tables.get(arg.value.id, [])
                how = "import_module" if isinstance(arg, ast.Constant) else "table"
                yield from emit(node, [(t, how) for m in found if (t := self._own(m))],
                                in_function, type_only)
            if isinstance(node, ast.If) and _is_type_checking(node.test):
                for stmt in node.body:
                    yield from visit(stmt, in_function, True)
                for stmt in node.orelse:
                    yield from visit(stmt, in_function, type_only)
                return
            inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                     ast.Lambda))
            for child in ast.iter_child_nodes(node):
                yield from visit(child, inner, type_only)

        yield from visit(tree, False, False)
        # a package with a lazy export table imports each module in it (on first use)
        call = next((stmt for stmt in tree.body if isinstance(stmt, ast.Assign)
                     and isinstance(stmt.value, ast.Call)
                     and _call_name(stmt.value.func) == "lazy_exports"), None)
        for module in sorted(set(self.lazy.get(importer, {}).values())):
            yield from emit(call or tree, [(module, "lazy")], False, False)

    def cycles(self, *, runtime_only: bool = False) -> list[list[str]]:
        """Groups of two or more modules that import each other in a loop (Tarjan)."""
        edges: dict[str, set[str]] = {name: set() for name in self.files}
        for imp in self.imports:
            if not (runtime_only and imp.type_only):
                edges[imp.importer].add(imp.imported)
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        out: list[list[str]] = []

        def strong(v: str) -> None:
            index[v] = low[v] = len(index)
            stack.append(v)
            on_stack.add(v)
            for w in sorted(edges[v]):
                if w not in index:
                    strong(w)
                    low[v] = min(low[v], low[w])
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                group = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    group.append(w)
                    if w == v:
                        break
                if len(group) > 1:
                    out.append(sorted(group))

        for v in sorted(edges):
            if v not in index:
                strong(v)
        return sorted(out)
