"""Exceptions that carry a ledger classification.

An :class:`InfraError` raised anywhere in an instance (fixture or test body) makes the
instance ``infra_failed`` with its ``reason_code``: infrastructure is never scored as the
model's failure. A :class:`RefusalError` stops the run before any instance starts (exit 2,
or the code it names).
"""

from __future__ import annotations


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
