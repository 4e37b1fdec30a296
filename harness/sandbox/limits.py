"""The copy-out caps (a light module: the pytest options name them at collection time)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_COPY_MB = 1024
DEFAULT_MAX_COPY_FILES = 100_000
SCAN_FACTOR = 4


@dataclass(frozen=True)
class CopyLimits:
    """Per-copy caps on what a copy-out keeps (and, times ``SCAN_FACTOR``, streams)."""

    max_bytes: int = DEFAULT_MAX_COPY_MB << 20
    max_files: int = DEFAULT_MAX_COPY_FILES
