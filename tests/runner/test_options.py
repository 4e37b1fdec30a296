"""Issue 42: the runner's options live in one typed module (harness.runner.options). Every
option is registered there, once; a value that can be judged alone is refused when pytest
parses it, in one line naming the option and the fix; RunOptions is the typed view the
controller reads."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.model_proxy.tape import ORDERS as TAPE_ORDERS
from harness.run.plan import PlanError
from harness.runner import options
from harness.runner.options import REPLAY_ORDERS, RunOptions
from tests.support.suite import run_pytest

RUNNER = Path(options.__file__).parent
GROUPS = {"harness": "benchmark runner", "harness budget": "campaign budgets and reservations",
          "harness agent": "the agent under test", "model gateway pacing": ""}


class _Group:
    def __init__(self, group: argparse._ArgumentGroup, flags: list[str]) -> None:
        self.group, self.flags = group, flags

    def addoption(self, *names: str, **attrs: Any) -> None:
        self.flags.extend(names)
        self.group.add_argument(*names, **attrs)


class _Parser:
    """What ``pytest_addoption`` uses of pytest's parser, over a plain argparse parser."""

    def __init__(self) -> None:
        self.argparser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
        self.groups: dict[str, tuple[str, _Group]] = {}
        self.flags: list[str] = []

    def getgroup(self, name: str, description: str = "") -> _Group:
        if name not in self.groups:
            arggroup = self.argparser.add_argument_group(description or name)
            self.groups[name] = (description, _Group(arggroup, self.flags))
        return self.groups[name][1]


def registered() -> _Parser:
    parser = _Parser()
    options.pytest_addoption(parser)  # type: ignore[arg-type]
    return parser


def parse(*args: str) -> argparse.Namespace:
    return registered().argparser.parse_args(list(args))


def test_every_runner_option_is_registered_once_and_in_this_module(
        pytestconfig: pytest.Config) -> None:
    parser = registered()
    assert len(parser.flags) == len(set(parser.flags)) > 75
    assert {name: description for name, (description, _) in parser.groups.items()} == GROUPS
    others: list[str] = []
    for path in sorted(RUNNER.glob("*.py")):
        if path.name == "options.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name == "pytest_addoption":
                others.append(f"{path.name}:{node.lineno} pytest_addoption")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "addoption":
                others.append(f"{path.name}:{node.lineno} addoption(")
    assert others == []
    # this session loaded the runner (its entry point): the module is its one registrar
    adders = [name for name, plugin in pytestconfig.pluginmanager.list_name_plugin()
              if name.startswith("harness.runner") and hasattr(plugin, "pytest_addoption")]
    assert adders == ["harness.runner.options"]
    for action in parser.argparser._actions:
        pytestconfig.getoption(action.dest)  # registered in this session (ValueError if not)


BAD = [
    ("--harness-progress", "loud"), ("--retry-infra-backoff", "-1"),
    ("--retry-infra-backoff", "soon"), ("--max-copy-out-mb", "0"),
    ("--image-disk-ceiling-gb", "0"), ("--phase-timeout", "pul=60"),
    ("--phase-timeout", "pull=-1"), ("--campaign-budget-usd", "-5"),
    ("--budget-usd", "nan"), ("--meter-poll-sec", "x"), ("--custody-lease-sec", "2"),
    ("--min-free-disk-gb", "inf"), ("--gateway-poll-sec", "0"), ("--agent-kill-after", "-1"),
    ("--agent-exec-margin", "x"), ("--per-task-limit-usd", "0"),
    ("--model-record-budget", "2000"), ("--model-record-budget", "0,5"),
    ("--replay-order", "random"), ("--model-concurrency", "0"), ("--model-rpm", "0"),
    ("--model-wait-max-s", "-1"), ("--model-retries", "-1"), ("--model-retry-budget", "x"),
    ("--model-stream-idle-s", "0"),
]


@pytest.mark.parametrize(("flag", "bad"), BAD)
def test_each_check_refuses_a_bad_value_in_one_line(flag: str, bad: str) -> None:
    with pytest.raises(argparse.ArgumentError) as caught:
        parse(flag, bad)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"argument {flag}: {bad!r}"), message
    assert any(fix in message for fix in ("e.g.", "use ", "pass at least")), message


def test_every_check_is_in_the_refusal_cases() -> None:
    checked = {action.option_strings[0] for action in registered().argparser._actions
               if action.type not in (None, int, float)
               and action.option_strings[0] != "--campaign-url"}  # its own module's tests
    assert checked == {flag for flag, _ in BAD} | {"--max-copy-out-files", "--prior-spend-usd",
                                                    "--per-task-reserve-usd",
                                                    "--budget-reserve-usd",
                                                    "--unknown-cost-allowance-usd",
                                                    "--meter-blindness-sec",
                                                    "--meter-read-timeout-sec"}


def test_good_values_parse_to_what_the_plugins_read() -> None:
    ns = parse("--retry-infra-backoff", "0.5", "--phase-timeout", "pull=60", "--model-rpm",
               "60", "--model-retries", "0", "--budget-usd", "12.5", "--per-task-limit-usd",
               "0.50", "--replay-order", "sequence", "--model-record-budget", "10,100")
    assert ns.retry_infra_backoff == 0.5 and ns.phase_timeout == ["pull=60"]
    assert ns.model_rpm == 60.0 and ns.model_retries == 0 and ns.budget_usd == 12.5
    assert ns.per_task_limit_usd == "0.50"  # as written: the run's configuration records it
    assert ns.replay_order == "sequence" and ns.model_record_budget == "10,100"
    defaults = parse()  # string defaults go through their checks too
    assert defaults.retry_infra_backoff == 1.0 and defaults.custody_lease_sec == 90.0
    assert defaults.budget_reserve_usd == 0.0 and defaults.harness_progress == "auto"
    assert REPLAY_ORDERS == TAPE_ORDERS


def test_run_options_of_reads_a_parsed_config(tmp_path: Path) -> None:
    ns = parse("--run-root", str(tmp_path / "r"), "--dry-run", "--no-report", "--shard", "2/4",
               "--retry-infra", "3", "--instance", "a",
               "--harness-progress", "lines", "--max-recovery-generations", "5")
    config: Any = SimpleNamespace(option=ns)
    got = RunOptions.of(config, {"instance": ["a"]})
    assert (got.run_root, got.dry_run, got.report, got.shard_text, got.shard_given) == (
        str(tmp_path / "r"), True, False, "2/4", True)
    assert (got.retry_infra, got.max_recovery_generations, got.progress) == (3, 5, "lines")
    assert got.instances == ("a",) and got.selectors_given
    plain = RunOptions.of(SimpleNamespace(option=parse()))  # type: ignore[arg-type]
    assert (plain.retry_infra, plain.max_recovery_generations, plain.report) == (1, 2, True)
    assert not plain.shard_given and not plain.selectors_given and plain.resume_from is None
    with pytest.raises(AttributeError):
        plain.dry_run = True  # type: ignore[misc]  # frozen
    bad: Any = SimpleNamespace(option=parse("--max-recovery-generations", "many"))
    with pytest.raises(PlanError, match="--max-recovery-generations 'many'"):
        RunOptions.of(bad)  # the controller's refusal (exit 2), kept


def test_a_bad_value_is_a_usage_error_of_one_line(tmp_path: Path) -> None:
    run = run_pytest("benchmarks/programbench", tmp_path / "run", "--pb-fixtures", "--dry-run",
                     "--phase-timeout", "eval=soon", timeout=120)
    assert run.rc == 4, run.out
    run.result.stdout.fnmatch_lines(
        ["*argument --phase-timeout: 'eval=soon': SECONDS must be a number >= 0*"])
    assert not (tmp_path / "run").exists()
