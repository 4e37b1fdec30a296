"""Fixtures of the runner's tests.

* ``suite`` and ``mode``: subprocess runs of the built-in ``selftest`` benchmark. Each test
  builds a tiny benchmark suite in a temporary directory and runs pytest on it in a
  subprocess. Tests where xdist changes what happens (the controller/worker split: the
  manifest, selection, an internal error, signals, dry runs) also run with ``-n 2`` through
  the ``mode`` fixture; the rest run once, in a single process.
* ``no_git``: for the in-process tests of the runner's pure logic (no Docker, no pytest
  subprocess), which name it with ``pytestmark = pytest.mark.usefixtures("no_git")``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.core.models import GitState
from harness.run import manifest as mf
from tests.support.suite import Suite, finish, wait_for

__all__ = ["finish", "wait_for"]


@pytest.fixture
def suite(tmp_path: Path) -> Suite:
    return Suite(tmp_path)


@pytest.fixture(params=["single", "xdist"])
def mode(request: pytest.FixtureRequest) -> list[str]:
    return [] if request.param == "single" else ["-n", "2"]


@pytest.fixture
def no_git(monkeypatch: pytest.MonkeyPatch) -> None:
    """The manifests written here do not ask git about the checkout (a few git processes
    per manifest): the source state is not what these tests look at."""
    monkeypatch.setattr(mf, "source_state", lambda: GitState(available=False))
