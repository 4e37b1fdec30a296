"""The runner's sweeps (a pytest plugin): at admission, the orphans of runs whose lock is
not held (a SIGKILLed run); after a worker crash, what that worker left; at session end,
everything with this run's label, listed again to prove nothing is left."""

from __future__ import annotations

from typing import Any

import pytest

from harness.runtime import RunContext


def _extra(run: RunContext) -> dict[str, Any]:
    if run.manifest is None:
        return {}
    sweeps: dict[str, Any] = run.manifest.extra.setdefault("sweeps", {})
    return sweeps


def pytest_harness_admit(config: pytest.Config, run: RunContext) -> None:
    from harness.layout import keep_marker
    from harness.sandbox.cleanup import sweep_stale

    if config.getoption("keep_sandboxes", False):
        keep_marker(run.run_root).touch()  # later start-up sweeps leave this run alone

    try:
        swept = sweep_stale()
    except Exception as exc:  # no Docker here: nothing of ours can be left either
        _extra(run)["startup"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        return
    _extra(run)["startup"] = {"stale_runs_swept": swept}


def pytest_harness_worker_crashed(config: pytest.Config, run: RunContext, worker_id: str) -> None:
    from harness.sandbox.cleanup import sweep

    if config.getoption("keep_sandboxes", False):
        return
    removed = sweep(run.run_id, worker_id)
    _extra(run).setdefault("worker_crashes", []).append({"worker": worker_id,
                                                         "removed": removed})


def pytest_harness_session_finish(config: pytest.Config, run: RunContext,
                                  summary: dict[str, Any]) -> None:
    from harness.sandbox.cleanup import sweep

    if config.getoption("keep_sandboxes", False):
        message = f"--keep-sandboxes: remove this run's sandboxes with: harness sweep --run {run.run_id}"
        _extra(run)["final"] = {"kept": True, "command": f"harness sweep --run {run.run_id}"}
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(message)
        return
    try:
        removed = sweep(run.run_id)
    except Exception as exc:
        _extra(run)["final"] = {"error": f"{type(exc).__name__}: {exc}"[:1000]}
        return
    _extra(run)["final"] = {"removed": removed}
