"""In-process tests of the runner's pure logic: no Docker, no pytest subprocess."""

from __future__ import annotations

import pytest

from harness.core.models import GitState
from harness.run import manifest as mf


@pytest.fixture(autouse=True)
def _no_git(monkeypatch: pytest.MonkeyPatch) -> None:
    """The manifests written here do not ask git about the checkout (a few git processes
    per manifest): the source state is not what these tests look at."""
    monkeypatch.setattr(mf, "source_state", lambda: GitState(available=False))
