"""The garbage collector around bulk allocations of long-lived objects.

A ledger read or a resume's carry allocates thousands of rows that live on; each automatic
full pass of the collector in the middle walks the whole, growing heap for garbage that is
not there (two such passes were a tenth of a resume of 2,000 rows). :func:`paused` holds
the collector off for such a stretch; :func:`settled` moves what is alive once a session
is set up out of the collector's full passes for good.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """No automatic collection inside (the caller allocates what it keeps: rows, not
    cycles); the collector is as it was afterwards."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def settled() -> None:
    """Everything alive now lives until the session ends (modules, the collected items, the
    plan, the rows a resume carried): out of every later full pass (``gc.freeze``)."""
    gc.freeze()
