"""The runner's sweeps and lease (a pytest plugin): at admission, this run's lease on the
engine (:mod:`harness.sandbox.lease`), then the orphans of runs proven dead; after a worker
crash, what that worker left; at session end, the lease stops and everything with this
run's label is removed, listed again to prove nothing is left."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from harness.core.layout import keep_marker

if TYPE_CHECKING:
    from harness.core.models import SweepsRecord
    from harness.runner.instance import RunContext
    from harness.sandbox.lease import Lease

LEASE_KEY: pytest.StashKey[Lease] = pytest.StashKey()


def _sweeps(run: RunContext) -> SweepsRecord:
    """The manifest's ``sweeps`` section (a throwaway one when the run has no manifest)."""
    from harness.core.models import SweepsRecord

    if run.manifest is None:
        return SweepsRecord()
    if run.manifest.extra.sweeps is None:
        run.manifest.extra.sweeps = SweepsRecord()
    return run.manifest.extra.sweeps


NOTHING_TO_RUN = "nothing to run: every selected instance is carried from an ancestor"


def admit_sweeps(config: pytest.Config, run: RunContext) -> None:
    keep = bool(config.getoption("keep_sandboxes", False))
    if keep:
        keep_marker(run.run_root).touch()  # for humans: `harness sweep --run` ends this run
    if run.plan.runs_nothing:  # no sandbox of this run to protect or make room for
        _sweeps(run).startup = {"skipped": NOTHING_TO_RUN}
        return
    from harness.sandbox.cleanup import sweep_stale
    from harness.sandbox.lease import Lease

    try:  # first the lease: a sweep elsewhere must see this run alive from now on
        lease = Lease(run.run_id, run.run_root, keep=keep).acquire()
        config.stash[LEASE_KEY] = lease
        _sweeps(run).lease = lease.record()
        swept = sweep_stale()
    except Exception as exc:  # no Docker here: nothing of ours can be left either
        _sweeps(run).startup = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        return
    _sweeps(run).startup = {"stale_runs_swept": swept}


def _stop_lease(config: pytest.Config, run: RunContext | None = None, *,
                release: bool = False) -> None:
    lease = config.stash.get(LEASE_KEY, None)
    if lease is None:
        return
    if release:
        lease.release()  # a kept lease stays: later sweeps leave the run alone
    else:
        lease.stop()  # the lease expires (and its owner pid is gone) after the process
    if run is not None:
        _sweeps(run).lease = lease.record()


def pytest_harness_worker_crashed(config: pytest.Config, run: RunContext, worker_id: str) -> None:
    from harness.sandbox.cleanup import kept_sandboxes, sweep

    if config.getoption("keep_sandboxes", False):
        return
    removed = sweep(run.run_id, worker_id, spare_kept=True)
    kept = [k["name"] for k in kept_sandboxes(run.run_id) if k["instance"]]
    sweeps = _sweeps(run)
    sweeps.worker_crashes = [
        *(sweeps.worker_crashes or []),
        {"worker": worker_id, "removed": removed, **({"kept_for_reattach": kept} if kept else {})}]


def pytest_harness_session_finish(config: pytest.Config, run: RunContext,
                                  summary: dict[str, Any]) -> None:
    if run.plan.runs_nothing:  # no lease was taken and no sandbox made
        _sweeps(run).final = {"skipped": NOTHING_TO_RUN}
        return
    from harness.sandbox.cleanup import kept_sandboxes, sweep

    try:
        _stop_lease(config, run, release=True)
    except Exception as exc:  # the sweep below removes the lease anyway
        _sweeps(run).lease_release_error = f"{type(exc).__name__}: {exc}"[:500]
    if config.getoption("keep_sandboxes", False):
        message = f"--keep-sandboxes: remove this run's sandboxes with: harness sweep --run {run.run_id}"
        _sweeps(run).final = {"kept": True, "command": f"harness sweep --run {run.run_id}"}
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(message)
        return
    try:
        removed = sweep(run.run_id, spare_kept=True)
        kept = kept_sandboxes(run.run_id)
    except Exception as exc:
        _sweeps(run).final = {"error": f"{type(exc).__name__}: {exc}"[:1000]}
        return
    final: dict[str, Any] = {"removed": removed}
    _sweeps(run).final = final
    if kept:  # an agent server's task still works in them: a resume reattaches
        final["kept_for_reattach"] = [k["name"] for k in kept]
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                f"{len(kept)} sandbox(es) kept for a reattach (their agent-server task had "
                f"not settled; each ends at its TTL): resume with --resume-from "
                f"{run.run_root}, or remove them with: harness sweep --run {run.run_id}")


def pytest_unconfigure(config: pytest.Config) -> None:
    _stop_lease(config)  # a run that never finished: the lease expires (its pid is gone)
