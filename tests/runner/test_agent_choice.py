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
    """Each read of an agent option ``D`` (its dest, or its flag ``--d-e-s-t``) in the forms
    the code base uses: ``x.getoption(D)`` or ``x.option(D)`` (by position or ``name=``,
    through a name bound to either), ``config.option.D``, ``getattr(config.option, D)`` and
    ``vars(config.option)[D]``."""
    flags = {f"--{d.replace('_', '-')}": d for d in dests} | {d: d for d in dests}
    tree = ast.parse(source)
    readers = {"getoption", "option", "getattr"} | {  # opt = config.getoption
        t.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Attribute) and node.value.attr in ("getoption", "option")
        for t in node.targets if isinstance(t, ast.Name)}

    def named(node: ast.expr | None) -> str | None:
        value = node.value if isinstance(node, ast.Constant) else None
        return flags.get(value) if isinstance(value, str) else None

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else (
                node.func.id if isinstance(node.func, ast.Name) else "")
            if callee in readers:
                given = [*node.args[:2], *(k.value for k in node.keywords if k.arg == "name")]
                found += [(node.lineno, d) for d in map(named, given) if d]
        elif (isinstance(node, ast.Attribute) and node.attr in dests
              and isinstance(node.value, ast.Attribute) and node.value.attr == "option"):
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call) and (
                getattr(node.value.func, "id", "") == "vars") and named(node.slice):
            found.append((node.lineno, str(named(node.slice))))
    return sorted(set(found))


def product_files() -> list[Path]:
    """The product's modules, and the benchmarks' test bodies (a benchmark's own)."""
    files = [p for top in PRODUCT for p in (ROOT / top).rglob("*.py")]
    return [p for p in files if "__pycache__" not in p.parts
            and (not p.name.startswith("test_") or p.parts[-3] == "benchmarks")]


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
              'also_fine = config.option.pb_workspace\n'
              'opt = config.getoption\n'
              'url = opt("gateway_url")\n'
              'by_flag = config.getoption("--agent-repo")\n'
              'by_name = config.getoption(name="model_replay")\n'
              'by_getattr = getattr(config.option, "solve_model")\n'
              'by_vars = vars(config.option)["agent_command"]\n'
              'not_an_option = details["agent"]\n')
    assert readers_of(source, dests) == [
        (1, "agent"), (2, "agent_repo"), (4, "agent_env"), (7, "gateway_url"),
        (8, "agent_repo"), (9, "model_replay"), (10, "solve_model"), (11, "agent_command")]


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


def test_an_empty_agent_repo_is_no_checkout() -> None:
    """``--agent-repo ""`` (an empty CI variable) seeds nothing: admission records no
    provenance for it, so no copy of the runner's folder may reach the sandbox."""
    got = choice(agent="command", agent_repo="")
    assert got.repo is None and got.seed is None


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
