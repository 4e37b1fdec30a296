"""Issue 43 (6): one table of refusals (docs/exit-codes.md) that the code is checked against:
every refusal reason the code can raise is in it, and every refusal exits 2."""

from __future__ import annotations

import ast
import re

from tests.spec.refusals import REPO, refusal_paths

TABLE = REPO / "docs" / "exit-codes.md"
# Reasons built in a dict of messages before one RefusalError(reason=reason) raises them.
MESSAGE_TABLES = ("harness/agents/gateway/preflight.py", "harness/agents/provenance.py")


def documented() -> set[str]:
    return set(re.findall(r"^\| `([a-z_]+)` \| [a-z_]+ \|", TABLE.read_text(), re.M))


def dict_keys(relpath: str) -> set[str]:
    """The string keys of every dict literal assigned to ``messages`` in a module."""
    out: set[str] = set()
    for node in ast.walk(ast.parse((REPO / relpath).read_text())):
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "messages" for t in node.targets):
            value = node.value
            if isinstance(value, ast.Dict):
                out |= {k.value for k in value.keys
                        if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return out


def budget_refusals() -> set[str]:
    """The campaign refusal codes of harness/budget/errors.py (after its refusal comment)."""
    text = (REPO / "harness/budget/errors.py").read_text()
    block = text.split("Refusal reasons at campaign open", 1)[1].split("CAMPAIGN_STAGE", 1)[0]
    return set(re.findall(r'= "([a-z_]+)"', block))


def test_every_refusal_the_code_raises_is_in_the_table_and_exits_2() -> None:
    paths = refusal_paths()
    assert {r: c for r, c in paths.items() if c != {2}} == {}  # a refusal exits 2, always
    raised = set(paths) | budget_refusals() | set().union(*map(dict_keys, MESSAGE_TABLES))
    assert len(raised) > 50
    assert sorted(raised - documented()) == []


def test_the_table_names_nothing_the_code_cannot_raise() -> None:
    raised = set(refusal_paths()) | budget_refusals() | set().union(
        *map(dict_keys, MESSAGE_TABLES))
    assert sorted(documented() - raised) == []
