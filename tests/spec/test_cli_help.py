"""Issue 43 (9): ``harness --help`` names every tool a group holds, so it cannot go stale."""

from __future__ import annotations

import importlib

from harness.budget.reconcile import _parser as campaign_parser
from harness.core.registry import benchmark_commands
from tests.support.suite import run_cli


def _listed(text: str) -> list[str]:
    """The subcommands a help text names after its colon (``tools: a, b, c``)."""
    return [name.strip() for name in text.rsplit(":", 1)[1].split(",")]


def test_each_benchmark_group_lists_all_its_subcommands() -> None:
    for name, (module, _, text) in benchmark_commands().items():
        commands = importlib.import_module(module).COMMANDS
        assert _listed(text) == list(commands), (name, text)


def test_campaign_lists_its_subcommands_and_both_stores() -> None:
    done = run_cli("--help")
    line = next(x for x in done.stdout.splitlines() if x.strip().startswith("campaign"))
    sub = next(a for a in campaign_parser()._actions if a.dest == "command")
    assert _listed(line) == list(sub.choices)  # type: ignore[arg-type]
    assert "PostgreSQL" in line
    assert "export, gate, submission, prepare, rescore" in done.stdout
