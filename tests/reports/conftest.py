"""Run roots for the report tests.

Two sources, one shape (a run root: ``run_manifest.json``, ``result_index.jsonl``,
``<benchmark>/<instance_id>/`` folders):

- ``make_run`` writes a run root by hand through ``harness.core.models`` and
  ``harness.core.fsutil.append_line``: fast, and it reaches states a live run rarely produces
  (torn tail, carried rows, unlisted instances, declared official summaries);
- ``real_run_root`` is a real run of the built-in ``selftest`` benchmark, run by pytest in
  a subprocess. Tests that need "a real run" depend only on this fixture.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.core.models import Outcome, TaskRow
from tests.reports.report_runs import row, write_run
from tests.support.suite import Suite

MakeRun = Callable[..., Path]
CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def browser() -> Any:
    """Headless Chromium (Debian's ``chromium``) driven by playwright, for one module: the
    sync API keeps an asyncio loop running in its thread while it is open, and a later test
    on the same worker that runs its own loop (Cowork's MCP clients) would fail on it."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium")
    from playwright import sync_api  # here, not at collection (about 0.2 s a process)

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"]
        )
        yield browser
        browser.close()


@pytest.fixture
def make_row() -> Callable[..., TaskRow]:
    """``make_row(key, run_id="run-a", **fields)``: a ledger row with sensible defaults."""
    return row


@pytest.fixture
def make_run(tmp_path: Path) -> MakeRun:
    """``make_run(name, rows, selection=None, files=True, torn_tail=None, **manifest)``."""

    def make(
        name: str,
        rows: list[TaskRow],
        selection: list[str] | None = None,
        *,
        files: bool = True,
        torn_tail: str | None = None,
        **manifest_fields: Any,
    ) -> Path:
        return write_run(
            tmp_path / name, rows, selection, files=files, torn_tail=torn_tail, **manifest_fields
        )

    return make


def programbench_rows(run_id: str = "run-a") -> list[TaskRow]:
    """A realistic ProgramBench ledger: scores, costs, an infra failure, a retry, a carry."""
    k = "programbench/"
    return [
        row(
            k + "abishekvashok__cmatrix.5c082c6",
            run_id,
            score=1.0,
            resolved=True,
            tests_passed=240,
            tests_total=240,
            cost_usd=1.25,
            cost_known=True,
            duration_s=1800,
            worker="gw0",
            reason_code="resolved",
        ),
        row(
            k + "antirez__kilo.323d93b",
            run_id,
            score=0.97,
            resolved=False,
            near_resolved=True,
            tests_passed=970,
            tests_total=1000,
            cost_usd=2.5,
            cost_known=True,
            duration_s=2400,
            worker="gw1",
        ),
        row(
            k + "jqlang__jq.4b1ae2c",
            run_id,
            score=0.5,
            resolved=False,
            tests_passed=400,
            tests_total=800,
            cost_usd=0.75,
            cost_known=True,
            duration_s=900,
            worker="gw2",
        ),
        row(
            k + "sharkdp__fd.1a2b3c4",
            run_id,
            status="failed",
            outcome=Outcome.AGENT_FAILED,
            reason_code="agent_timeout",
            score=None,
            duration_s=3600,
            worker="gw3",
            error="TimeExceeded: wall clock 6h",
        ),
        # First attempt hit Docker, the retry in the same run scored: last row wins.
        row(
            k + "tmux__tmux.abc1234",
            run_id,
            status="infra_failed",
            outcome=Outcome.INFRA_FAILED,
            infra=True,
            reason_code="docker_unavailable",
            duration_s=5,
            worker="gw0",
        ),
        row(
            k + "tmux__tmux.abc1234",
            run_id,
            score=0.25,
            tests_passed=50,
            tests_total=200,
            duration_s=1200,
            worker="gw1",
            attempt=2,
        ),
        row(
            k + "vim__vim.deadbee",
            run_id,
            status="infra_failed",
            outcome=Outcome.INFRA_FAILED,
            infra=True,
            reason_code="gateway_unreachable",
            duration_s=3,
            worker="gw2",
        ),
        row(
            k + "redis__redis.cafef00",
            run_id,
            status="completed",
            outcome=Outcome.CARRIED,
            score=0.8,
            resolved=False,
            carried_from="run-0",
            cost_usd=3.0,
            cost_known=True,
            duration_s=4000,
            details={"carried_status": "completed"},
        ),
    ]


PROGRAMBENCH_MISSING = ["programbench/torvalds__linux.0000001", "programbench/zz__last.0000002"]


@pytest.fixture
def programbench_missing() -> list[str]:
    """Keys the ``programbench_run`` selection lists but its ledger has no row for."""
    return list(PROGRAMBENCH_MISSING)


@pytest.fixture
def programbench_run(make_run: MakeRun) -> Path:
    rows = programbench_rows()
    keys = list(dict.fromkeys(r.key for r in rows)) + PROGRAMBENCH_MISSING
    # the ProgramBench session writes its info file and declares it as an official summary
    root = make_run("pb-run", rows, keys, extra={"official_summaries": ["programbench_info.txt"]})
    (root / "programbench_info.txt").write_text(
        "Instance                        Score\ncmatrix                         ✅\nAverage  63.7%\n"
    )
    return root


SELFTEST_TASKS: list[dict[str, Any]] = [
    {"id": "ok", "work": "succeed", "count": 3},
    {"id": "bad", "work": "fail"},
    {"id": "half", "work": "partial", "score": 0.5},
    {"id": "near", "work": "partial", "score": 0.96},
    {"id": "gave-up", "work": "agent_fail"},
    {"id": "docker", "work": "infra", "reason": "docker_unavailable"},
    {"id": "slow", "work": "sleep", "seconds": 0.2},
]

@pytest.fixture(scope="session")
def real_run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished ``-n 2`` run of the built-in ``selftest`` benchmark (a pytest process)."""
    base = tmp_path_factory.mktemp("selftest")
    suite = Suite(base)
    suite.tasks(SELFTEST_TASKS)
    root = base / "run"
    run = suite.run("-n", "2", root=root, timeout=300)
    assert (root / "run_manifest.json").exists(), run.out[-3000:]
    assert run.rc == 1, run.out[-3000:]  # one infra failure -> exit 1
    return root


@pytest.fixture(scope="session")
def resumed_run_root(real_run_root: Path) -> Path:
    """``real_run_root`` resumed: settled instances carried forward, the infra one re-run."""
    base = real_run_root.parent
    root = base / "run-resumed"
    run = Suite(base).run("--resume-from", str(real_run_root), root=root, timeout=300)
    assert (root / "run_manifest.json").exists(), run.out[-3000:]
    return root
