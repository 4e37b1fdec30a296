"""The engine of the instance this process runs, when the run places instances on engines:
made active by :func:`harness.sandbox.placement.placed`, read by every client and subprocess
that must reach it (:func:`instance_environment`). ``os.environ`` is never rewritten for it.

A leaf module, so the client (:mod:`harness.sandbox.client`) reads it without importing
placement, which imports the engines, which make clients.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Protocol


class PlacedEngine(Protocol):
    """What an active slot gives: the environment that reaches its engine."""

    def environment(self, base: Mapping[str, str] | None = None) -> dict[str, str]: ...


_active: PlacedEngine | None = None  # per process, as the instance it runs


def swap(slot: PlacedEngine | None) -> PlacedEngine | None:
    """Make ``slot`` the active one; the one it replaces."""
    global _active
    previous, _active = _active, slot
    return previous


def current() -> PlacedEngine | None:
    return _active


def instance_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a client or subprocess that must reach the running instance's
    engine: ``base`` (default: this process's environment) with the active slot's engine
    variables on top; a copy of ``base`` when no slot is active."""
    slot = _active
    if slot is None:
        return dict(os.environ if base is None else base)
    return slot.environment(base)


__all__ = ["PlacedEngine", "current", "instance_environment", "swap"]
