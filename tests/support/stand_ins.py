"""Stand-ins for tests that build an agent server's task body without an engine."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from harness.sandbox.execution import ExecResult


def answers_id(uids: Mapping[str, int] | None = None) -> Callable[..., ExecResult]:
    """A FAKE sandbox ``exec`` that answers ``id`` as the kernel would for each user
    (``root`` uid 0, any other 1000 unless ``uids`` says otherwise); the real answer is
    tested on Docker in ``tests/security/test_gateway_attacks_review.py``."""
    table = {"root": 0, **(uids or {})}

    def run(argv: list[str], *, user: str, **_: Any) -> ExecResult:
        assert argv == ["id"], argv
        uid = table.get(user, 1000)
        return ExecResult(exit_code=0, stdout=f"uid={uid}({user}) gid={uid}({user})\n".encode(),
                          stderr=b"", wall_s=0.0)

    return run
