"""The agent option is read once, into :class:`AgentChoice`, and reaches the trial, the
agent kind and the row from there (issue 42): no benchmark and no other runner module reads
``--agent`` or its settings, and a benchmark sees the chosen kind's capabilities and seed
on the trial, never the option."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from _pytest.config.argparsing import Parser

from harness.runner import options
from harness.runner.agent_choice import AgentChoice, agent_choice
from harness.runner.trial import AgentSeed, Trial

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("harness", "benchmarks", "reports")
# the agent option's own modules: the typed choice, and the agent's preflights and fixture
READERS = {"harness/runner/agent_choice.py", "harness/runner/agent_plugin.py",
           "harness/runner/options.py"}


def agent_dests() -> dict[str, Any]:
    """The agent group's options as the runner registers them: dest -> default."""
    parser = Parser(_ispytest=True)  # the parser pytest builds (its constructor is private)
    options.pytest_addoption(parser)
    group = parser.getgroup("harness agent")
    return {opt.dest: opt.default for opt in group.options}


def readers_of(source: str, dests: set[str]) -> list[tuple[int, str]]:
    """Each ``x.getoption("D")``, ``x.option("D")`` and ``config.option.D`` of an agent
    option ``D``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("getoption", "option") and node.args
                and isinstance(node.args[0], ast.Constant) and node.args[0].value in dests):
            found.append((node.lineno, str(node.args[0].value)))
        elif (isinstance(node, ast.Attribute) and node.attr in dests
              and isinstance(node.value, ast.Attribute) and node.value.attr == "option"):
            found.append((node.lineno, node.attr))
    return sorted(found)


def product_files() -> list[Path]:
    files = [p for top in PRODUCT for p in (ROOT / top).rglob("*.py")]
    return [p for p in files if not p.name.startswith("test_") and "__pycache__" not in p.parts]


def test_only_the_agent_options_room_reads_them() -> None:
    dests = set(agent_dests())
    assert {"agent", "agent_env", "agent_repo", "model_replay"} <= dests
    files = product_files()
    assert any(p.parts[-3:] == ("benchmarks", "cowork_bench", "steps.py") for p in files)
    breaks = [f"{p.relative_to(ROOT)}:{line} reads --{d.replace('_', '-')}"
              for p in files if str(p.relative_to(ROOT)) not in READERS
              for line, d in readers_of(p.read_text(), dests)]
    assert not breaks, ("read the run's AgentChoice (harness.runner.agent_choice), or the "
                        "trial's agent and agent_seed, instead:\n" + "\n".join(breaks))


def test_the_reader_rule_sees_a_benchmark_reading_the_option() -> None:
    dests = set(agent_dests())
    source = ('kind = trial.option("agent")\n'
              'repo = config.getoption("agent_repo", None)\n'
              'fine = config.getoption("pb_workspace")\n'
              'names = config.option.agent_env\n'
              'also_fine = config.option.pb_workspace\n')
    assert readers_of(source, dests) == [(1, "agent"), (2, "agent_repo"), (4, "agent_env")]


class _Config:
    """A parsed command line: the runner's agent options at their defaults, then ``given``."""

    def __init__(self, **given: Any) -> None:
        self.values = {**agent_dests(), "dry_run": False, **given}
        self.stash = pytest.Stash()
        self.reads = 0

    def getoption(self, name: str, default: Any = None) -> Any:
        self.reads += 1
        return self.values[name]


def choice(**given: Any) -> AgentChoice:
    return agent_choice(_Config(**given))  # type: ignore[arg-type]


def test_the_choice_is_read_once_a_run() -> None:
    config = _Config(agent="command", agent_env=["TOKEN"], agent_repo="/src/agent")
    first = agent_choice(config)  # type: ignore[arg-type]
    reads = config.reads
    assert agent_choice(config) is first and config.reads == reads  # type: ignore[arg-type]
    assert (first.kind, first.runs, first.env, first.seed) == (
        "command", "command", ("TOKEN",), AgentSeed("/src/agent", False))


@pytest.mark.parametrize(("given", "kind", "runs"), [
    ({"agent": "oracle"}, "oracle", "oracle"),
    ({"dry_run": True}, "gateway", "gateway"),  # a dry run previews the gateway's task
    ({}, "", "nop"),  # nothing chosen: admission refuses a benchmark that needs an agent
])
def test_the_kind_a_run_records_and_the_kind_that_runs(given: dict[str, Any], kind: str,
                                                       runs: str) -> None:
    got = choice(**given)
    assert (got.given, got.kind, got.runs) == (given.get("agent"), kind, runs)


@pytest.mark.parametrize(("given", "paid"), [
    ({"agent": "gateway"}, True),
    ({"agent": "command"}, True),
    ({}, True),  # none chosen counts as paid (the agent's admission refuses it anyway)
    ({"agent": "oracle"}, False),
    ({"agent": "nop"}, False),
    ({"agent": "gateway", "dry_run": True}, False),
    ({"agent": "command", "model_replay": "tapes"}, False),
])
def test_what_spends_money(given: dict[str, Any], paid: bool) -> None:
    assert choice(**given).spends_money is paid


def _trial(kind: str, seed: AgentSeed | None) -> Trial:
    ctx = SimpleNamespace(result=SimpleNamespace(details={}))
    request = SimpleNamespace(config=None)
    return Trial(ctx, request, kind, ("TOKEN",), seed)  # type: ignore[arg-type]


def test_a_benchmark_sees_capabilities_and_a_seed_only_for_a_kind_that_runs_inside() -> None:
    seed = AgentSeed("/src/agent", allow_dirty=False)
    inside, outside = _trial("command", seed), _trial("gateway", seed)
    assert inside.agent.runs_in_sandbox and inside.agent_seed == seed
    assert outside.agent.reattaches and outside.agent_seed is None
    assert _trial("mini-swe-agent", None).agent.shell_only
    assert inside.agent_env == ("TOKEN",)


def test_the_row_names_the_chosen_kind_before_the_agent_runs() -> None:
    trial = _trial("oracle", None)
    assert trial.ctx.result.details["agent"] == {"kind": "oracle"}
