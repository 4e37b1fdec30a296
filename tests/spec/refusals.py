"""The refusal paths of the code, read from its source (no import): every
``RefusalError(..., reason="code", exit_code=N)`` and every ``ResumeError(message, "code")``
(a resume's refusals, raised again as ``RefusalError`` with exit 2)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("harness", "benchmarks", "reports")


def _literal(node: ast.expr | None) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def refusal_paths() -> dict[str, set[int]]:
    """reason code -> the exit codes the code refuses it with."""
    out: dict[str, set[int]] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
                    continue
                kw = {k.arg: k.value for k in node.keywords}
                if node.func.id == "RefusalError":
                    reason, code = _literal(kw.get("reason")), _literal(kw.get("exit_code"))
                    code = 2 if "exit_code" not in kw else code
                elif node.func.id == "ResumeError" and len(node.args) > 1:
                    reason, code = _literal(node.args[1]), 2
                else:
                    continue
                if isinstance(reason, str) and isinstance(code, int):
                    out.setdefault(reason, set()).add(code)
    return out
