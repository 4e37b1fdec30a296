"""The core knows no benchmark and no report: nothing under ``harness/`` imports them, and
benchmarks and the report reach the core through the registry (entry points or built-ins)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from harness.core import registry

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("benchmarks", "reports")


def forbidden_imports(path: Path) -> list[str]:
    """``file:line module`` for every import of a forbidden package, at any depth (inside
    functions, ``if TYPE_CHECKING``, try blocks), in every form, and via ``importlib``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.stmt, ast.expr)):
            continue  # imports are statements, import_module() calls expressions
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                   or (isinstance(node.func, ast.Name)
                       and node.func.id in ("import_module", "__import__")))):
            names = [node.args[0].value]
        for name in names:
            if name.split(".", 1)[0] in FORBIDDEN:
                found.append(f"{path}:{node.lineno} {name}")
    return found


def test_no_module_under_harness_imports_benchmarks_or_reports() -> None:
    files = sorted((ROOT / "harness").rglob("*.py"))
    assert len(files) > 50
    offenders = [hit for f in files for hit in forbidden_imports(f)]
    assert offenders == []


@pytest.mark.parametrize("source", [
    "import reports.write",
    "from benchmarks.programbench import fixture",
    "def f():\n    from reports.progress import Progress\n",
    "import importlib\nimportlib.import_module('benchmarks.cowork_bench.cli')\n",
    "if True:\n    import benchmarks as b\n",
])
def test_the_check_sees_every_import_form(tmp_path: Path, source: str) -> None:
    bad = tmp_path / "probe.py"
    bad.write_text(source)
    assert forbidden_imports(bad)
    assert not forbidden_imports(ROOT / "harness" / "core" / "registry.py")


def _fake_entry_points(groups: dict[str, dict[str, str]]) -> Any:
    def entry_points(*, group: str) -> list[metadata.EntryPoint]:
        return [metadata.EntryPoint(name, value, group)
                for name, value in groups.get(group, {}).items()]
    return entry_points


def test_benchmarks_come_from_the_entry_point_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry.metadata, "entry_points", _fake_entry_points(
        {registry.BENCHMARKS_GROUP: {
            "programbench": "benchmarks.programbench.registration:REGISTRATION"}}))
    names = [r.name for r in registry.benchmarks()]
    assert names == ["programbench"]
    from harness.cli import all_commands

    commands = all_commands()
    assert "programbench" in commands and "cowork" not in commands
    assert "report" in commands  # the report plugin's built-in fallback


def test_without_entry_points_the_builtin_list_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry.metadata, "entry_points", _fake_entry_points({}))
    regs = {r.name: r for r in registry.benchmarks()}
    assert set(regs) == {"programbench", "cowork", "harbor"}
    assert [s.label for s in regs["programbench"].images] == ["ProgramBench offline fixture"]
    plugin = registry.report_plugin()
    assert plugin is not None and set(plugin.commands) == {"report", "compare"}


def test_a_benchmark_that_does_not_import_is_left_out(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(registry.metadata, "entry_points", _fake_entry_points(
        {registry.BENCHMARKS_GROUP: {"ghost": "no_such_benchmark_pkg.registration:REGISTRATION",
                                     "cowork": registry.BUILTIN_BENCHMARKS["cowork"]}}))
    assert [r.name for r in registry.benchmarks()] == ["cowork"]
    assert "benchmark 'ghost' not available" in capsys.readouterr().err


@pytest.mark.slow
def test_pip_install_without_extras_gives_a_core_that_imports_and_runs(tmp_path: Path) -> None:
    """``pip install .`` (with uv's pip, from a copy of the source: the build writes beside
    it) into a new virtualenv: no ``programbench``, and the core imports and answers
    ``harness --help``."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for name in ("harness", "reports", "benchmarks"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["UV_PYTHON_DOWNLOADS"] = "never"
    uv = [sys.executable, "-m", "uv"]
    for cmd in (["venv", "-q", "--python", sys.executable, str(venv)],
                ["pip", "install", "-q", "--python", str(venv / "bin" / "python"), str(src)]):
        proc = subprocess.run([*uv, *cmd], env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
    code = textwrap.dedent("""
        import importlib.util, sys
        assert importlib.util.find_spec("programbench") is None, "programbench is installed"
        import harness, harness.runner.plugin, harness.cli
        assert harness.__file__.startswith(sys.prefix), harness.__file__
        raise SystemExit(harness.cli.main(["--help"]))
    """)
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", code], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "merge" in proc.stdout and "report" in proc.stdout
    script = subprocess.run([str(venv / "bin" / "harness"), "--help"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert script.returncode == 0 and script.stdout == proc.stdout


def test_vocabulary_and_threshold_are_the_adapters() -> None:
    """The core's adapter speaks the runner's own words and has no threshold; ProgramBench
    and Cowork bring theirs."""
    from benchmarks.cowork_bench.adapter import CoworkAdapter
    from benchmarks.programbench.adapter import ProgramBenchAdapter
    from harness.core.adapter import BenchmarkAdapter
    from harness.core.models import Outcome

    core = BenchmarkAdapter()
    assert core.status_for(Outcome.SCORED, True) == "scored"
    assert core.near_resolved_at is None
    pb = ProgramBenchAdapter()
    assert pb.status_for(Outcome.SCORED, True) == "completed"
    assert pb.status_for(Outcome.AGENT_FAILED, None) == "failed"
    assert pb.near_resolved_at == 0.95
    assert CoworkAdapter.status_for(CoworkAdapter.__new__(CoworkAdapter), Outcome.SCORED,
                                    True) == "passed"


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (``if TYPE_CHECKING`` included)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return out


@pytest.mark.parametrize(("importer", "imported"), [
    ("harness/agents/base.py", "harness.agents.oracle"),
    ("harness/agents/base.py", "harness.agents.command"),
    ("harness/agents/base.py", "harness.agents.gateway.agent"),
    ("harness/agents/base.py", "harness.agents.mini_swe"),
    ("harness/agents/base.py", "harness.agents.host_command"),
    ("harness/agents/base.py", "harness.agents.command_proxy"),
    ("harness/agents/gateway/client.py", "harness.agents.gateway.run"),
    ("harness/sandbox/images/builders.py", "harness.sandbox.images.build"),
])
def test_former_import_cycles_stay_broken(importer: str, imported: str) -> None:
    assert imported not in imported_modules(ROOT / importer)


def test_agent_kinds_come_from_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.agents import base

    assert type(base.make_agent("oracle")).__name__ == "OracleAgent"
    monkeypatch.setitem(base.AGENT_MODULES, "echo", "harness.agents.base")
    monkeypatch.setitem(base._FACTORIES, "echo", lambda options: base.NopAgent())
    assert isinstance(base.make_agent("echo"), base.NopAgent)
    with pytest.raises(ValueError, match="unknown agent kind 'nope'"):
        base.make_agent("nope")
