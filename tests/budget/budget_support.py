"""Helpers shared by the budget tests (imported as a plain module: tests have no packages)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

FINGERPRINT = "sha256:0123456789abcdef"
BASELINE = 10.0


@dataclass
class KeyEndpoint:
    """A real HTTP server on 127.0.0.1 answering ``GET /api/v1/key`` like the provider."""

    base_url: str
    usage: float = 1.23
    limit_remaining: float | None = 8.77
    status: int = 200
    delay_sec: float = 0.0
    requests: list[dict[str, str]] = field(default_factory=list)
    on_request: Callable[[], None] | None = None


def children_running(script_name: str) -> list[int]:
    """Pids of this process's children whose command line mentions ``script_name``."""
    found = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2 :].split()[1])
        if ppid == me and script_name.encode() in cmdline:
            found.append(int(entry.name))
    return found
