"""Where the harness keeps its host cache: ``$HARNESS_CACHE_DIR``, else ``~/.cache/harness``
(images and their locks, the pulled-image inventory, the host id, static tools, the
benchmarks' parsed tasks, fixtures and wheels: each in its own entry below it)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "HARNESS_CACHE_DIR"


def cache_root() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "harness"
