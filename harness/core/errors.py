"""Exceptions that carry a ledger classification.

An :class:`InfraError` raised anywhere in an instance (fixture or test body) makes the
instance ``infra_failed`` with its ``reason_code``: infrastructure is never scored as the
model's failure. A :class:`RefusalError` stops the run before any instance starts (exit 2,
or the code it names).
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable, Iterable
from typing import Any


class HarnessError(Exception):
    """Base class of the runner's own errors."""


class InfraError(HarnessError):
    """Docker, network, gateway, budget or other plumbing failed; not the model's fault."""

    reason_code = "infra_error"

    def __init__(self, message: str, reason_code: str | None = None) -> None:
        super().__init__(message)
        if reason_code is not None:
            self.reason_code = reason_code


class RefusalError(HarnessError):
    """The run must not start (bad input, incompatible resume, failed admission).

    ``stage`` names the check, ``reason`` is a stable code; the message is one line that
    names the input and the fix.
    """

    def __init__(self, message: str, *, stage: str, reason: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.stage = stage
        self.reason = reason
        self.exit_code = exit_code


class RunInterrupted(BaseException):
    """Raised inside a running instance when the run is asked to stop (signal, budget)."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


class RenamedOption:
    """A benchmark option's old spelling (issue 42: every benchmark's options carry its
    prefix). It stays registered, hidden from ``--help``, so a command line that still
    uses it is refused in one line naming the new flag, never read as something else::

        --eval: renamed --pb-eval; write --pb-eval off
    """

    def __init__(self, old: str, new: str, *, flag: bool = False) -> None:
        self.old, self.new, self.flag = old, new, flag
        self.dest = "renamed_" + old.lstrip("-").replace("-", "_")

    def register(self, group: Any) -> None:
        """Add the old spelling to a pytest option group (or an argparse parser): a flag, or
        an option with a value."""
        kind = {"action": "store_const", "const": ""} if self.flag else {"metavar": "VALUE"}
        add = getattr(group, "addoption", None) or group.add_argument
        add(self.old, dest=self.dest, default=None, help=argparse.SUPPRESS, **kind)

    def refusal(self, value: str) -> RefusalError:
        write = f"{self.new} {shlex.quote(value)}" if not self.flag else self.new
        return RefusalError(f"{self.old}: renamed {self.new}; write {write}",
                            stage="options", reason="bad_option")


def refuse_renamed(getoption: Callable[[str, Any], Any],
                   renamed: Iterable[RenamedOption]) -> None:
    """The first old spelling given (``getoption`` is ``config.getoption``): a refusal."""
    for option in renamed:
        value = getoption(option.dest, None)
        if value is not None:
            raise option.refusal(str(value))
