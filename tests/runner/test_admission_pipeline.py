"""A run's admission is one ordered pipeline (harness.runner.admission_pipeline): its order
is the documented one, the controller runs it, and no runner plugin implements the
``pytest_harness_admit`` hook (a step cannot hide in plugin registration order)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.runner import admission_pipeline, plugin
from harness.runner.admission_pipeline import STEPS, admit

REPO = Path(__file__).resolve().parents[2]

# The documented order (the module's docstring): the order the hooks had when each plugin
# implemented pytest_harness_admit (the option checks tryfirst, the benchmarks' conftests
# next, then the runner's plugins last-registered first).
ORDER = ("engine_options", "benchmarks", "phase_deadlines", "model_pacing", "agent",
         "budget", "engines", "image_policy", "lease_and_sweep", "sandbox_runtime")


def test_the_pipeline_runs_in_the_documented_order() -> None:
    assert tuple(name for name, _ in STEPS) == ORDER
    doc = admission_pipeline.__doc__ or ""
    listed = re.findall(r"^\s*\d+\. ``([a-z_]+)``", doc, flags=re.MULTILINE)
    assert tuple(listed) == ORDER


def test_each_step_is_a_function_of_a_runner_module() -> None:
    for name, step in STEPS:
        assert step.__module__.startswith("harness.runner."), name
        assert not step.__name__.startswith("pytest_"), name  # no hook hides as a step


def test_no_runner_plugin_implements_the_admission_hook() -> None:
    modules = [plugin.__name__, *plugin.pytest_plugins]
    for name in modules:
        assert not hasattr(importlib.import_module(name), "pytest_harness_admit"), name
    sources = [p for p in (REPO / "harness").rglob("*.py") if p.name != "hookspecs.py"]
    found = [str(p.relative_to(REPO)) for p in sources
             if "def pytest_harness_admit" in p.read_text()]
    assert found == []


def test_admit_runs_every_step_in_order_and_stops_at_a_refusal() -> None:
    from harness.core.errors import RefusalError

    ran: list[str] = []

    def step(name: str, refuse: bool = False) -> Any:
        def run(config: Any, run: Any) -> None:
            ran.append(name)
            if refuse:
                raise RefusalError("no", stage="test", reason="test")
        return run

    steps = tuple((n, step(n)) for n in ORDER)
    admit(SimpleNamespace(), SimpleNamespace(), steps)  # type: ignore[arg-type]
    assert ran == list(ORDER)
    ran.clear()
    refusing = tuple((n, step(n, refuse=n == "agent")) for n in ORDER)
    with pytest.raises(RefusalError):
        admit(SimpleNamespace(), SimpleNamespace(), refusing)  # type: ignore[arg-type]
    assert ran == list(ORDER[:ORDER.index("agent") + 1])


def test_the_benchmarks_step_calls_their_hook() -> None:
    calls: list[tuple[Any, Any]] = []
    hook = SimpleNamespace(pytest_harness_admit=lambda config, run: calls.append((config, run)))
    config, run = SimpleNamespace(hook=hook), SimpleNamespace()
    dict(STEPS)["benchmarks"](config, run)  # type: ignore[arg-type]
    assert calls == [(config, run)]


def test_the_controller_runs_the_pipeline_not_the_hook() -> None:
    """The plugin hands the pipeline to the controller (which imports no plugin: no import
    cycle), and the controller calls the hook only through the pipeline's step."""
    runner = REPO / "harness" / "runner"
    assert "pytest_harness_admit" not in (runner / "controller.py").read_text()
    assert "admission(self.config, run)" in (runner / "controller.py").read_text()
    plugin_text = (runner / "plugin.py").read_text()
    assert "from harness.runner.admission_pipeline import admit as admit_run" in plugin_text
    assert "admission=admit_run" in plugin_text
