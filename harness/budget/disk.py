"""Disk reserve: is there room on the run root's filesystem to start another instance?"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .models import DiskStatus

GIB = 1 << 30


def check_disk(path: str | os.PathLike[str], min_free_gb: float | None) -> DiskStatus:
    """Free space of the filesystem holding ``path`` (or its nearest existing parent).

    ``min_free_gb`` is in GiB (2**30 bytes, as ``df -h`` shows); None or 0 never fails.
    The runner refuses to start an instance (reason ``disk_reserve``) when ``ok`` is False.
    """
    probe = Path(path).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    usage = shutil.disk_usage(probe)
    minimum = int((min_free_gb or 0) * GIB)
    return DiskStatus(
        path=str(probe),
        free_bytes=usage.free,
        total_bytes=usage.total,
        min_free_bytes=minimum,
        ok=usage.free >= minimum,
    )
