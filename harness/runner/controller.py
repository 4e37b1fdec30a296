"""The controller: runs once per session (the xdist controller or the single process).

It admits the run (run root, manifest first, frozen plan), learns the selection once
collection is done, is the ONLY writer of the ledger, writes the rows nobody else can (a
crashed worker's instance, interrupted and never-started instances), and finalizes the
manifest with outcome and exit code on every exit path.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness.budget.models import RunProgress
from harness.core import collector
from harness.core.argv import without_options
from harness.core.errors import RefusalError
from harness.core.fsutil import atomic_write_json
from harness.core.layout import collection_file, lock_path, state_dir, workers_dir
from harness.core.models import (
    DiagnosticWriteFailed,
    InfraRetries,
    Manifest,
    Outcome,
    Refusal,
    Selection,
    SelectionChange,
    TaskRow,
)
from harness.core.outcomes import instance_key, split_attempt
from harness.core.signals import StopGuard, read_stop, request_stop
from harness.run import manifest as mf
from harness.run.ledger import LedgerWriter, apply_tally, ledger_path, tally
from harness.run.model import RunModel, setting_sources
from harness.run.plan import fingerprint, new_run_id, validate_run_id
from harness.run.resume import (
    Ancestry,
    ResumeError,
    ResumePlan,
    carry_rows,
    check_generations,
)
from harness.run.samples import record_samples
from harness.runner.admission import (
    admit_resume,
    check_resume_provenance,
    refuse_reused_root,
    selection_change,
)
from harness.runner.agent_choice import agent_choice
from harness.runner.instance import ROW_PROPERTY, RunContext
from harness.runner.live_view import LiveView
from harness.runner.options import RunOptions
from harness.runner.progress_monitor import ProgressMonitor, run_progress

if TYPE_CHECKING:
    from filelock import UnixFileLock

EXIT_OK, EXIT_INFRA, EXIT_REFUSED, EXIT_STOPPED = 0, 1, 2, 3
# Options that do not change results: left out of the fingerprint and the resume command.
ROOT_OPTIONS = ("--run-root", "--run-id", "--resume-from", "--shard")


class Controller:
    def __init__(self, config: pytest.Config, options: RunOptions) -> None:
        self.config = config
        self.options = options
        self.run: RunContext | None = None
        self.manifest: Manifest | None = None
        self.writer: LedgerWriter | None = None
        self.lock: UnixFileLock | None = None
        self.selection: list[str] | None = None
        self.nodeids: dict[str, str] = {}
        self.key_nodeids: dict[str, str] = {}
        self.rows: dict[str, TaskRow] = {}
        self.running: dict[str, tuple[str, float]] = {}
        self.monitor: ProgressMonitor | None = None  # monitor.json without a budget
        self.budget_monitor = False  # the budget supervisor writes monitor.json
        self.last_checkpoint = 0.0
        self.guard: StopGuard | None = None
        self.collection_errors = 0
        self.refused = False
        self.internal_errors = 0
        self.progress: Any = None  # the report plugin's progress view
        self.live: LiveView | None = None
        self.report_path: Path | None = None
        self.report_error: str | None = None
        self.ancestry: Ancestry | None = None
        self.resume_plan: ResumePlan | None = None
        self.late_refusal: RefusalError | None = None  # refused once the selection was known
        self.retries: Counter[str] = Counter()  # --retry-infra: retries by reason code

    # admission --------------------------------------------------------------------------
    def resolve_root(self, benchmarks: list[str]) -> tuple[str, Path]:
        opts = self.options
        run_id = opts.run_id or new_run_id(benchmarks[0] if len(benchmarks) == 1 else "run")
        validate_run_id(run_id)
        root = Path(opts.run_root) if opts.run_root else opts.runs_root / run_id
        return run_id, root.resolve()

    def refuse_reused_root(self, run_id: str, root: Path, argv: list[str]) -> None:
        self.refused = True
        refuse_reused_root(run_id, root, argv, EXIT_REFUSED)

    def admit(self, run: RunContext, config_dict: dict[str, Any],
              benchmark_versions: dict[str, str], argv: list[str], workers: int, *,
              admission: Callable[[pytest.Config, RunContext], None]) -> None:
        """Create the run root, write the manifest first, then plan (resume), then run the
        ``admission`` steps (:func:`harness.runner.admission_pipeline.admit`)."""
        self.run = run
        root = run.run_root
        if root.exists():
            self.refuse_reused_root(run.run_id, root, argv)
        state_dir(root).mkdir(parents=True)
        from filelock import Timeout, UnixFileLock  # off the collection path

        self.lock = UnixFileLock(str(lock_path(root)))
        try:
            self.lock.acquire(timeout=0)
        except Timeout as exc:  # pragma: no cover - a fresh root cannot be locked by others
            raise RefusalError(f"{root} is locked by another run", stage="run_root",
                               reason="run_root_locked") from exc
        manifest = mf.new_manifest(run_id=run.run_id, run_root=root, argv=argv,
                                   dry_run=run.plan.dry_run, workers=workers)
        manifest.benchmarks = sorted(run.adapters)
        manifest.benchmark_versions = benchmark_versions
        manifest.config = config_dict
        manifest.config_fingerprint = fingerprint(config_dict)
        manifest.shard = run.plan.shard
        manifest.selection.selectors = dict(self.options.selectors)
        if run.samples > 1:
            manifest.extra.attempts = run.samples
        manifest.extra.settings = dict(setting_sources(
            self.config.invocation_params.args, resumed=bool(self.options.resume_from)))
        self.manifest = run.manifest = manifest
        mf.write_manifest(manifest)  # manifest first: everything after can be refused on disk
        ledger_path(root).touch()
        self.writer = LedgerWriter(root)
        try:
            compare = self.options.compare_to
            if compare and not mf.manifest_path(Path(compare)).is_file():
                raise RefusalError(f"--compare-to {compare} is not a run root (no "
                                   f"{mf.MANIFEST_NAME}); pass an earlier run's directory",
                                   stage="options", reason="bad_option")
            if self.options.resume_from:
                self.plan_resume(run, config_dict, benchmark_versions)
            atomic_write_json(root / mf.PLAN_NAME, run.plan)
            admission(self.config, run)
            self.check_resume_provenance()
        except RefusalError as exc:
            self.refuse(exc)
            raise
        mf.checkpoint(manifest, "admitted")

    def plan_resume(self, run: RunContext, config_dict: dict[str, Any],
                    versions: dict[str, str]) -> None:
        assert self.manifest is not None
        rp = admit_resume(self.options, run, self.manifest, config_dict, versions)
        self.ancestry, self.resume_plan = rp.ancestry, rp

    def check_resume_provenance(self) -> None:
        if self.resume_plan is None or self.manifest is None or self.run is None \
                or self.run.plan.dry_run:
            return
        check_resume_provenance(self.config, self.resume_plan, self.manifest)

    def refuse(self, exc: RefusalError) -> None:
        self.refused = True
        if self.manifest is None:
            return
        self.manifest.refusal = Refusal(stage=exc.stage, reason=exc.reason, message=str(exc))
        if not self.manifest.selection.resolved:
            self.record_requested_selection()
        self.finalize(outcome="refused", exit_code=exc.exit_code)

    def record_requested_selection(self) -> None:
        """A run refused before collection: the units its options asked for (the adapters'
        instances named by ``--instance``/``--task-file``/the benchmark's own selectors, K
        each; ``-k``/``-m`` stay in ``selectors``), marked ``requested``, not resolved."""
        m, run = self.manifest, self.run
        if m is None or run is None:
            return
        try:
            wanted = set(self.options.instances)
            keys = [instance_key(name, spec.instance_id)
                    for name, adapter in sorted(run.adapters.items())
                    for spec in adapter.instances(self.config)
                    if not wanted or spec.instance_id in wanted]
        except Exception as exc:  # the refusal is recorded whatever the listing does
            m.extra.finish_errors = [*(m.extra.finish_errors or []),
                                     f"requested selection: {type(exc).__name__}: {exc}"[:500]]
            return
        units = RunModel.of_keys(keys, run.samples).units
        m.selection = Selection(resolved=False, instance_ids=units, count=len(units),
                                selectors=m.selection.selectors, source="requested")

    # selection --------------------------------------------------------------------------
    def set_selection(self, nodeids: dict[str, str]) -> None:
        """nodeid -> key of every selected item, once collection is final."""
        if self.selection is not None or self.manifest is None or self.run is None:
            return
        self.nodeids = dict(nodeids)
        self.key_nodeids = {key: nodeid for nodeid, key in nodeids.items()}
        keys = list(self.key_nodeids)
        self.selection = keys
        m = self.manifest
        m.selection = Selection(
            resolved=True, instance_ids=keys, count=len(keys),
            selectors=m.selection.selectors,
            source="ancestor" if self.run.plan.selection is not None else "collection",
        )
        sizes = {name: a.benchmark_size for name, a in self.run.adapters.items()}
        m.extra.benchmark_sizes = sizes
        m.subset_notice = RunModel.of_manifest(m).notice(sizes)  # tasks, never attempts
        m.resume.carried = sum(1 for k in keys if k in self.run.plan.carried)
        m.resume.to_run = len(keys) - m.resume.carried
        if self.resume_plan is not None and self.run.plan.selection is None:
            # the ancestor's selection as this run's keys (another K: its tasks K times)
            m.extra.resume_selection = SelectionChange(**selection_change(
                self.resume_plan.selection, keys))
        mf.checkpoint(m, "selection_resolved")
        self.check_resume_selection(keys)
        self.start_progress(len(keys))
        self.carry_settled(keys)

    def carry_settled(self, keys: list[str]) -> None:
        """Write the row of every selected instance settled in an ancestor, before any
        instance runs: one ledger append and one fsync for all of them (the items still
        report as skipped; they bring no row). A kill in the middle leaves a prefix of these
        rows, each as settled as its ancestor's: a resume of this run carries them again."""
        run, writer = self.run, self.writer
        if run is None or writer is None or not run.plan.carried:
            return
        def status(row: TaskRow) -> str:
            adapter = run.adapters.get(row.benchmark)
            return (adapter.status_for(Outcome.CARRIED, row.resolved) if adapter
                    else Outcome.CARRIED.value)

        with collector.paused():  # thousands of rows that live on: no collector pass
            rows = carry_rows(run.plan.carried, [k for k in keys if k not in self.rows],
                              run_id=run.run_id, worker=self.run_worker(), status=status,
                              nodeids=self.key_nodeids, ts_unix=time.time())
        if not rows:
            return
        names = list(agent_choice(self.config).env)
        if names:  # as every row: no value of an --agent-env name on disk
            from harness.run import secrets as secrets_scan

            scanner = secrets_scan.SecretScanner(secrets_scan.secrets_from_env(names))
            rows = [TaskRow.model_validate(secrets_scan.redact_json(
                r.model_dump(mode="json", by_alias=True), scanner)) for r in rows]
        writer.append_batch(rows, new_folders=True)
        for row in rows:
            self.record(row)
        self.checkpoint_counts()

    def check_resume_selection(self, keys: list[str]) -> None:
        """A resume with its own selectors that adds no instance to its ancestor's selection
        (``--instance X`` again) is a recovery: past ``--max-recovery-generations`` it is
        refused before any instance starts (exit 2, no row). Only growth starts a new stage
        (more instances, or more attempts per task)."""
        rp, m, run = self.resume_plan, self.manifest, self.run
        if rp is None or m is None or run is None or run.plan.selection is not None \
                or rp.grew_samples or selection_change(rp.selection, keys)["added"]:
            return
        remaining = [k for k in keys if k not in run.plan.carried]
        try:
            check_generations(rp, len(remaining), self.options.max_recovery_generations)
        except ResumeError as exc:
            refusal = RefusalError(str(exc), stage="resume", reason=exc.reason)
            self.late_refusal, self.refused = refusal, True
            m.refusal = Refusal(stage=refusal.stage, reason=refusal.reason, message=str(exc))
            mf.checkpoint(m, "refused")
            pytest.exit(str(exc), returncode=refusal.exit_code)

    def start_progress(self, total: int) -> None:
        if self.run is None:
            return
        self.live = LiveView(self.config, self.options.progress, self.run.run_root, total)
        self.progress = self.live.progress

    def load_worker_selection(self, worker_id: str) -> None:
        if self.selection is not None or self.run is None:
            return
        path = collection_file(self.run.run_root, worker_id)
        data = json.loads(path.read_text())
        self.set_selection(data["nodeids"])

    # rows -------------------------------------------------------------------------------
    def instance_started(self, nodeid: str, worker: str, started: float | None = None) -> None:
        key = self.nodeids.get(nodeid)
        if key is None or self.run is None or key in self.run.plan.carried:
            return  # a carried instance does not run (its row was written at selection)
        previous = self.running.get(key)
        if previous is not None and previous[0] != "controller":
            return
        self.running[key] = (worker, started or time.time())
        if self.monitor is not None:
            self.monitor.touch()
        if self.progress is not None and worker != "controller":
            self.progress.instance_started(key, worker, self.running[key][1])

    def on_report(self, report: pytest.TestReport) -> None:
        if self.writer is None:
            return
        if report.when == "setup":
            node = getattr(report, "node", None)
            worker = getattr(getattr(node, "gateway", None), "id", None) or self.run_worker()
            self.instance_started(report.nodeid, worker, time.time() - report.duration)
        props = dict(report.user_properties)
        if ROW_PROPERTY in props:
            self.append(TaskRow.model_validate(props[ROW_PROPERTY]))
            return
        if report.when == "???":  # type: ignore[comparison-overlap]
            key = self.nodeids.get(report.nodeid)
            if key is None:
                return
            worker = getattr(getattr(report, "node", None), "gateway", None)
            worker_id = getattr(worker, "id", "unknown")
            self.append(self.synthetic_row(key, Outcome.INFRA_FAILED, "worker_crashed",
                                           error=str(report.longrepr), worker=worker_id))
            assert self.run is not None
            with contextlib.suppress(Exception):
                self.config.hook.pytest_harness_worker_crashed(
                    config=self.config, run=self.run, worker_id=worker_id)

    def synthetic_row(self, key: str, outcome: Outcome, reason: str, *,
                      error: str | None = None, worker: str | None = None) -> TaskRow:
        assert self.run is not None
        benchmark, instance_id = key.split("/", 1)
        adapter = self.run.adapters.get(benchmark)
        status = adapter.status_for(outcome, None) if adapter else outcome.value
        started = self.running.get(key)
        nodeid = self.key_nodeids.get(key)
        task_id, sample = split_attempt(instance_id)
        return TaskRow(
            ts_unix=time.time(), run_id=self.run.run_id, benchmark=benchmark,
            instance_id=instance_id, status=status, outcome=outcome, reason_code=reason,
            attempt=self.attempt_of(key),
            worker=worker or (started[0] if started else "controller"), nodeid=nodeid,
            duration_s=round(time.time() - started[1], 3) if started else None,
            infra=outcome is Outcome.INFRA_FAILED, error=error,
            sample_of=task_id if sample is not None else None, sample=sample,
        )

    def attempt_of(self, key: str) -> int:
        """The attempt number of a row the controller writes for ``key``: the plan's, or
        after a try of this run (an infrastructure retry), the next one."""
        assert self.run is not None
        attempt = self.run.plan.attempts.get(key, 1)
        row = self.rows.get(key)
        if row is not None and row.run_id == self.run.run_id and row.outcome is not \
                Outcome.CARRIED:
            attempt = max(attempt, row.attempt + 1)
        return attempt

    def append(self, row: TaskRow) -> None:
        assert self.writer is not None
        self.writer.append(row)
        if row.details.run.retried is not None:  # --retry-infra runs it again
            self.count_retry(row.reason_code or "infra_error")
        self.record(row)
        if time.time() - self.last_checkpoint > 1.0:
            self.checkpoint_counts()

    def record(self, row: TaskRow) -> None:
        """A row is in the ledger: keep it, and tell the progress view and the hooks."""
        self.rows[row.key] = row
        self.running.pop(row.key, None)
        if self.monitor is not None:
            self.monitor.touch()
        if self.progress is not None:
            self.progress.row_written(row)
        with contextlib.suppress(Exception):
            self.config.hook.pytest_harness_row_written(config=self.config, row=row)

    def count_retry(self, reason: str) -> None:
        """One more infrastructure retry (by the failed try's reason code), on record in the
        manifest (``extra.infra_retries``)."""
        self.retries[reason] += 1
        if self.manifest is None:
            return
        self.manifest.extra.infra_retries = InfraRetries(
            limit=self.options.retry_infra,
            retries=sum(self.retries.values()), by_reason=dict(sorted(self.retries.items())))

    def retries_line(self) -> str | None:
        """The summary line of the run's infrastructure retries; None without any."""
        if not self.retries:
            return None
        total = sum(self.retries.values())
        reasons = ", ".join(f"{reason} {n}" for reason, n in sorted(self.retries.items()))
        return f"infrastructure retries {total}: {reasons} (each try has its row; the last " \
               f"counts)"

    def checkpoint_counts(self) -> None:
        if self.manifest is not None:
            self.last_checkpoint = time.time()
            self.update_counts()
            mf.checkpoint(self.manifest, "running")

    def fill_missing(self, cause: str | None) -> None:
        """Rows for selected instances that have none, or whose retry was cut short:
        interrupted or never started."""
        for key in self.selection or []:
            if key in self.rows and key not in self.running:  # running again: a retry
                continue
            if key in self.running:
                reason = f"interrupted:{cause or 'session_ended'}"
                self.append(self.synthetic_row(key, Outcome.INFRA_FAILED, reason))
            else:
                outcome = Outcome.BLOCKED if cause else Outcome.NOT_ATTEMPTED
                self.append(self.synthetic_row(key, outcome, cause or "not_run"))

    # summary and exit -------------------------------------------------------------------
    def update_counts(self) -> dict[str, Any]:
        assert self.manifest is not None
        selected = self.selection or []
        figures = tally(selected, self.rows)
        apply_tally(self.manifest, figures)
        return {"selected": len(selected), "counts": figures.counts,
                "outcomes": figures.outcome_counts, "mean_score": figures.mean_score}

    def decide_exit(self, cause: str | None, pytest_status: int = 0) -> tuple[str, int]:
        assert self.run is not None
        if self.late_refusal is not None:
            return "refused", self.late_refusal.exit_code
        outcomes = Counter(r.outcome for r in self.rows.values())
        if cause:
            return "stopped", EXIT_STOPPED
        if pytest_status == pytest.ExitCode.INTERNAL_ERROR or self.internal_errors:
            return "crashed", EXIT_INFRA
        if self.run.plan.dry_run:
            return "dry_run", EXIT_OK
        if self.selection is None or self.collection_errors:
            return "collection_failed", EXIT_REFUSED
        if not self.selection:
            return "empty_selection", EXIT_REFUSED
        if outcomes[Outcome.INFRA_FAILED] or outcomes[Outcome.NOT_ATTEMPTED] or \
                outcomes[Outcome.BLOCKED]:
            return "infra_failed", EXIT_INFRA
        if all(self.rows[k].outcome is Outcome.CARRIED
                                  for k in self.selection if k in self.rows):
            return "nothing_remaining", EXIT_OK
        return "completed", EXIT_OK

    def finish(self, pytest_status: int = 0) -> int | None:
        if self.run is None or self.manifest is None or self.manifest.finalized:
            return self.manifest.exit_code if self.manifest is not None else None
        if self.late_refusal is None:  # refused at selection: nothing ran, no row to write
            self.fill_missing(read_stop(self.run.run_root))
            try:
                self.config.hook.pytest_harness_session_results(
                    config=self.config, run=self.run, rows=dict(self.rows), append=self.append)
            except Exception as exc:  # session-level scoring must not lose the manifest
                self.finish_error(exc)
        cause = read_stop(self.run.run_root)  # once more: scoring above may have been stopped
        summary = self.update_counts()
        record_samples(self.manifest, self.rows)
        outcome, code = self.decide_exit(cause, pytest_status)
        self.manifest.resume_command = None if self.late_refusal else self.resume_command()
        summary.update(outcome=outcome, exit_code=code, stop_reason=cause)
        try:
            self.config.hook.pytest_harness_session_finish(
                config=self.config, run=self.run, summary=summary)
        except Exception as exc:  # a finishing step must not lose the manifest
            self.finish_error(exc)
        if self.live is not None:
            self.live.close()
        self.retry_ledger()
        self.finalize(outcome=outcome, exit_code=code, stop_reason=cause)
        self.write_report()
        return code

    def finish_error(self, exc: Exception) -> None:
        """A finishing step failed: on record (``extra.finish_errors``), the run goes on."""
        if self.manifest is not None:
            extra = self.manifest.extra
            extra.finish_errors = [*(extra.finish_errors or []),
                                   f"{type(exc).__name__}: {exc}"[:2000]]

    def retry_ledger(self) -> None:
        """Rows a failed ledger write kept in memory: one more try, then on record."""
        if self.writer is None or self.manifest is None:
            return
        self.writer.settle()  # the carried rows' folders, written behind the run
        if not self.writer.failures:
            return
        left = self.writer.flush_pending()
        self.manifest.extra.diagnostic_write_failed = DiagnosticWriteFailed(
            failed_writes=self.writer.failures, ledger_rows_unwritten=left)

    def write_report(self) -> None:
        """The HTML/Markdown report; a report problem never changes the run's exit status."""
        if self.run is None or not self.options.report or self.manifest is None:
            return
        try:
            from harness.core.registry import report_plugin

            report = report_plugin()
            if report is None:
                return
            compare = self.options.compare_to
            self.report_path = report.write_report(
                self.run.run_root, compare_to=Path(compare) if compare else None)
        except Exception as exc:
            self.report_error = f"{type(exc).__name__}: {exc}"

    def run_worker(self) -> str:
        return self.run.worker_id if self.run is not None else "main"

    def finalize(self, *, outcome: str, exit_code: int, stop_reason: str | None = None,
                 error: BaseException | None = None) -> None:
        if self.manifest is None or self.manifest.finalized:
            return
        mf.finalize(self.manifest, outcome=outcome, exit_code=exit_code,
                    stop_reason=stop_reason, error=error)
        if self.monitor is not None:
            self.monitor.close(stop_reason=stop_reason, exit_code=exit_code)

    def run_progress(self) -> RunProgress | None:
        """Units done, running and left (None before the selection is frozen)."""
        if self.selection is None:
            return None
        return run_progress(self.selection, self.rows, dict(self.running))

    def start_monitor(self) -> None:
        """``monitor.json`` for a run without a budget, when a benchmark asks for it."""
        run = self.run
        if run is None or self.budget_monitor or run.dry_run:
            return
        if any(a.writes_monitor for a in run.adapters.values()):
            self.monitor = ProgressMonitor(run.run_id, run.run_root, self.run_progress)

    def crash_finalize(self, error: BaseException | None) -> None:
        """Last resort (pytest_unconfigure): a session that never finished normally."""
        if self.manifest is None or self.manifest.finalized:
            return
        with contextlib.suppress(Exception):
            self.fill_missing(read_stop(self.run.run_root) if self.run else None)
            self.update_counts()
        self.finalize(outcome="crashed", exit_code=EXIT_INFRA, error=error)

    def emergency_exit(self, cause: str) -> None:
        """Second signal: record what we can, kill the workers, exit at once."""
        for pid in self.worker_pids():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.fill_missing(cause)
            self.update_counts()
            self.finalize(outcome="stopped", exit_code=EXIT_STOPPED, stop_reason=cause)
        self.release()

    def request_stop(self, cause: str, *, interrupt: bool) -> str:
        assert self.run is not None
        cause = request_stop(self.run.run_root, cause)
        if interrupt:
            if self.run.role == "single":
                os.kill(os.getpid(), signal.SIGUSR1)  # interrupts the instance running here
            for pid in self.worker_pids():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGUSR1)
        return cause

    def worker_pids(self) -> list[int]:
        if self.run is None:
            return []
        pids: list[int] = []
        for path in sorted(workers_dir(self.run.run_root).glob("*.pid")):
            with contextlib.suppress(ValueError, OSError):
                pid = int(path.read_text().strip())
                if pid != os.getpid():
                    pids.append(pid)
        return pids

    def resume_command(self) -> str:
        assert self.run is not None
        kept, _ = without_options(self.config.invocation_params.args, ROOT_OPTIONS)
        # One word: from the project's root with no path, pytest would take a run root
        # outside the project for a path to collect (harness.runner.startup.lost_config).
        return shlex.join(["pytest", *kept, f"--resume-from={self.run.run_root}"])

    def release(self) -> None:
        if self.lock is not None:
            with contextlib.suppress(Exception):
                self.lock.release()
            self.lock = None
