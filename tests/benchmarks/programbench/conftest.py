"""Shared fixtures of the ProgramBench adapter tests.

Docker tests build the offline fixture (image, blob dir, oracle files) once per machine;
without a Docker daemon they fail with the reason, they never skip.
"""

from __future__ import annotations

import pytest

from benchmarks.programbench.fixture import FixturePaths, ensure_fixture


@pytest.fixture(scope="session")
def pb_fixture() -> FixturePaths:
    return ensure_fixture()
