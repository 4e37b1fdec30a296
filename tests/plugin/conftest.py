"""Fixtures for subprocess runs of the built-in ``selftest`` benchmark.

Each test builds a tiny benchmark suite in a temporary directory and runs pytest on it in a
subprocess. Tests where xdist changes what happens (the controller/worker split: the
manifest, selection, an internal error, signals, dry runs) also run with ``-n 2`` through
the ``mode`` fixture; the rest run once, in a single process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.testing.suite import Suite, finish, wait_for

__all__ = ["finish", "wait_for"]


@pytest.fixture
def suite(tmp_path: Path) -> Suite:
    return Suite(tmp_path)


@pytest.fixture(params=["single", "xdist"])
def mode(request: pytest.FixtureRequest) -> list[str]:
    return [] if request.param == "single" else ["-n", "2"]
