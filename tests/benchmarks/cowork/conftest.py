"""Fixtures the Cowork Bench tests share.

``oracle_run``: one real oracle run of every ``cowork_mini`` task through the runner per
test session (``-n 2``, the checkers counted), read by the runner tests
(``test_cowork_runs.py``) and by the per-instance tests (``test_cowork_docker.py``), which
find the oracle's verdicts in its instance folders instead of running the oracle again.
Under ``pytest -n N`` the first worker that asks runs it; the others wait for its record.
"""

from __future__ import annotations

import pytest

from tests.benchmarks.cowork.cowork_run_support import shared_oracle_run
from tests.support.suite import Run


@pytest.fixture(scope="session")
def oracle_run(
    tmp_path_factory: pytest.TempPathFactory, worker_id: str
) -> tuple[Run, list[str], float]:
    """(the run, the instance ids the real checker ran for, its wall seconds)."""
    base = tmp_path_factory.getbasetemp()
    return shared_oracle_run(base if worker_id == "master" else base.parent)
