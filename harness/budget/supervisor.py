"""The controller's meter supervisor: polls the usage meter, saves each accepted reading
at once, tracks how old the last confirmed reading is, decides the stop reason and keeps
``monitor.json`` current.

Timing (the seed's rule): read every ``poll_sec``; after a failed or rejected read, retry
every ``retry_sec``. The run is blind when no reading *accepted and saved* was requested
within ``blindness_sec`` (counted from the supervisor's start until the first one);
rejected or failed readings never renew the window, and a save that completes after the
window expired does not renew it either. ``blindness_sec`` must exceed ``poll_sec +
read_timeout_sec`` so one slow read still fits.

Stop reasons (sticky, the first wins): ``budget_meter_unavailable`` (blind),
``campaign_persistence_failed`` (a reading or the settlement could not be saved),
``campaign_budget`` (spent + ``budget_reserve_usd`` reached the ceiling),
``campaign_lease_lost`` (the custody lease, renewed every quarter of ``lease_sec``, could
not be renewed before it expired, or another machine took the custody over). A stop is
written into the run's custody entry (so every worker's next ``reserve`` is refused with
it, when the file can still be saved) and handed to ``on_stop``.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from harness.run.ledger import report_write_failure

from . import accounting
from . import errors as E
from .campaign import Campaign
from .disk import check_disk
from .meter import Meter
from .models import (
    CampaignState,
    MeterDiagnostic,
    MeterReading,
    Monitor,
    MonitorMeter,
    RunProgress,
    RunRecord,
)
from .monitor import write_monitor


class MeterSupervisor:
    def __init__(
        self,
        campaign: Campaign,
        run_id: str,
        run_root: str | os.PathLike[str],
        meter: Meter | None,
        *,
        blindness_sec: float = 30.0,
        poll_sec: float = 15.0,
        retry_sec: float = 3.0,
        read_timeout_sec: float = 5.0,
        budget_reserve_usd: float = 0.0,
        min_free_gb: float | None = None,
        on_stop: Callable[[str], None] | None = None,
        controller_pid: int | None = None,
        lease_sec: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        diagnostics_kept: int = 50,
    ) -> None:
        if meter is not None and blindness_sec <= poll_sec + read_timeout_sec:
            raise ValueError(
                f"--meter-blindness-sec {blindness_sec:g} must exceed the poll interval "
                f"({poll_sec:g}s) plus one read ({read_timeout_sec:g}s)"
            )
        self.campaign = campaign
        self.run_id = run_id
        self.run_root = Path(run_root)
        self.meter = meter
        self.blindness_sec = blindness_sec
        self.poll_sec = poll_sec
        self.retry_sec = retry_sec
        self.read_timeout_sec = read_timeout_sec
        self.budget_reserve_usd = budget_reserve_usd
        self.min_free_gb = min_free_gb
        self.on_stop = on_stop
        self.controller_pid = controller_pid or os.getpid()
        # the run's progress for monitor.json (the controller's, set by the budget plugin)
        self.progress: Callable[[], RunProgress | None] | None = None
        self._clock = clock
        self._kept = diagnostics_kept
        self._started = clock()
        self._confirmed: float | None = None  # clock() at the request of the last accepted read
        self._next_read = self._started
        self.lease_sec = lease_sec
        self._next_renew = self._started + (lease_sec or 0.0) / 4
        self._attempt = 0
        self._last_usage: float | None = None
        self._limit_remaining: float | None = None
        self._meter_error: str | None = None
        self._diagnostics: list[MeterDiagnostic] = []
        self._stop_reason: str | None = None
        self._state: CampaignState | None = None
        self._record: RunRecord | None = None
        self._finished = False
        self._final: Monitor | None = None
        self._lock = threading.RLock()
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ public face

    @property
    def stop_reason(self) -> str | None:
        return self._stop_reason

    def poll(self) -> str | None:
        """One step: read the meter if due, check blindness and budget, write monitor.json.

        Returns the stop reason once the run must stop (None while it may go on).
        """
        with self._lock:
            if self._finished:
                return self._stop_reason
            if (
                self.meter is not None
                and self._stop_reason is None
                and self._clock() >= self._next_read
            ):
                self._read("poll")
            if self.lease_sec and self._clock() >= self._next_renew:
                self._renew()
            self._check_blindness()
            state = self._snapshot()  # campaign.json read once per tick
            self._check_campaign_budget(state)
            self._write(self._monitor(state))
            return self._stop_reason

    def start(self, tick_sec: float = 1.0) -> None:
        """Poll in a daemon thread every ``tick_sec`` until :meth:`finish` (or :meth:`halt`)."""

        def loop() -> None:
            while True:
                self.poll()
                if self._halt.wait(tick_sec):
                    return

        self._thread = threading.Thread(target=loop, name="harness-meter", daemon=True)
        self._thread.start()

    def halt(self) -> None:
        self._halt.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def finish(self, outcome: str, runner_exit_code: int | None = None) -> Monitor:
        """Final accounting reading, run record appended, custody ended, final monitor.json."""
        self.halt()
        with self._lock:
            if self._final is not None:
                return self._final
            reading = self._read("final") if self.meter is not None else None
            settlement: str = "unconfirmed"
            try:
                self._record = self.campaign.finish_run(
                    self.run_id, outcome, reading, meter_error=self._meter_error
                )
                settlement = "recorded"
            except E.CampaignPersistenceError as exc:
                self._note_error(str(exc))
                self._stop(E.CAMPAIGN_PERSISTENCE_FAILED)
            except E.CampaignStateError as exc:  # custody already ended (reconciled)
                self._note_error(str(exc))
            self._finished = True
            monitor = self._monitor(self._snapshot())
            monitor.finished = True
            monitor.runner_exit_code = runner_exit_code
            monitor.campaign_settlement = "recorded" if settlement == "recorded" else "unconfirmed"
            self._write(monitor)
            self._final = monitor
            return monitor

    def keep_custody(self, outcome: str, runner_exit_code: int | None, why: str) -> Monitor:
        """End supervision without ending custody: cleanup could not prove the run's
        containers and networks gone, so the campaign keeps the run's entry (and its open
        reservations) until ``harness campaign reconcile`` proves it. The final reading is
        still saved when it is acceptable."""
        self.halt()
        with self._lock:
            if self._final is not None:
                return self._final
            reading = self._read("final") if self.meter is not None else None
            if reading is not None:
                try:
                    self.campaign.record_reading(reading)
                except E.CampaignPersistenceError as exc:
                    self._note_error(str(exc))
            self._finished = True
            monitor = self._monitor(self._snapshot())
            monitor.finished = True
            monitor.runner_exit_code = runner_exit_code
            monitor.campaign_settlement = "unconfirmed"
            monitor.custody_unsettled = why
            self._write(monitor)
            self._final = monitor
            return monitor

    # ---------------------------------------------------------------- reading

    def _read(self, phase: str) -> MeterReading | None:
        assert self.meter is not None
        self._attempt += 1
        started = self._clock()
        previous = self._last_usage
        try:
            reading = self.meter.read(self.read_timeout_sec)
        except E.MeterError as exc:
            self._diagnose(phase, previous, None, False, exc.kind, str(exc))
            self._next_read = self._clock() + self.retry_sec
            return None
        if phase == "final":
            # Saved by finish_run together with the run record.
            rejection = accounting.reading_rejection(reading.usage, previous or 0.0)
            self._diagnose(
                phase,
                previous,
                reading.usage,
                rejection is None,
                "rejected" if rejection else None,
                rejection,
            )
            if rejection is not None:
                return None
            self._last_usage = reading.usage
            self._limit_remaining = reading.limit_remaining
            return reading
        try:
            accepted = self.campaign.record_reading(reading)
        except E.CampaignPersistenceError as exc:
            self._diagnose(phase, previous, reading.usage, False, "persistence", str(exc))
            self._stop(E.CAMPAIGN_PERSISTENCE_FAILED)
            return None
        if not accepted:
            last = self._campaign_last_usage()
            rejection = accounting.reading_rejection(
                reading.usage, last if last is not None else 0.0
            )
            self._diagnose(
                phase, previous, reading.usage, False, "rejected", rejection or "rejected"
            )
            self._next_read = self._clock() + self.retry_sec
            return None
        self._diagnose(phase, previous, reading.usage, True, None, None)
        if self._expired():  # a slow save cannot renew an expired window
            self._stop(E.BUDGET_METER_UNAVAILABLE)
        else:
            self._confirmed = started
            self._meter_error = None
        self._last_usage = reading.usage
        self._limit_remaining = reading.limit_remaining
        self._next_read = started + self.poll_sec
        return reading

    def _campaign_last_usage(self) -> float | None:
        try:
            return self.campaign.snapshot().last_usage
        except E.CampaignPersistenceError:
            return None

    def _diagnose(
        self,
        phase: str,
        previous: float | None,
        observed: float | None,
        accepted: bool,
        error_type: str | None,
        error: str | None,
    ) -> None:
        finite = observed if observed is not None and math.isfinite(observed) else None
        if error is not None:
            self._note_error(error)
        self._diagnostics.append(
            MeterDiagnostic(
                observed_at_unix=time.time(),
                phase="final" if phase == "final" else "poll",
                attempt=self._attempt,
                previous_usage=previous,
                observed_usage=finite,
                accepted=accepted,
                error_type=error_type,
                error=error,
            )
        )
        del self._diagnostics[: -self._kept]

    def _note_error(self, message: str) -> None:
        self._meter_error = message

    # ----------------------------------------------------------------- stopping

    def _age(self) -> float:
        since = self._confirmed if self._confirmed is not None else self._started
        return self._clock() - since

    def _expired(self) -> bool:
        return self.meter is not None and self._age() > self.blindness_sec

    def _check_blindness(self) -> None:
        if self._expired():
            self._stop(E.BUDGET_METER_UNAVAILABLE)

    def _renew(self) -> None:
        """Renew the custody lease; a failure to reach the campaign is retried at the next
        tick (until the lease runs out, when the renewal itself says the lease is lost)."""
        try:
            self.campaign.renew_lease(self.run_id)
        except E.CampaignStateError as exc:
            self._note_error(str(exc))
            self._stop(E.CAMPAIGN_LEASE_LOST)
            return
        except E.CampaignPersistenceError as exc:
            self._note_error(f"lease renewal: {exc}")
            return
        assert self.lease_sec is not None
        self._next_renew = self._clock() + self.lease_sec / 4

    def _check_campaign_budget(self, state: CampaignState | None) -> None:
        if (
            state is not None
            and state.spent_usd + self.budget_reserve_usd >= state.ceiling_usd - accounting.EPS
        ):
            self._stop(E.CAMPAIGN_BUDGET)

    def _stop(self, reason: str) -> None:
        if self._stop_reason is not None:
            return
        self._stop_reason = reason
        if reason != E.CAMPAIGN_PERSISTENCE_FAILED:
            try:
                self.campaign.request_stop(self.run_id, reason)
            except (E.CampaignPersistenceError, E.CampaignStateError) as exc:
                self._note_error(f"could not mark the run stopped: {exc}")
        if self.on_stop is not None:
            self.on_stop(reason)

    # ------------------------------------------------------------------ monitor

    def _snapshot(self) -> CampaignState | None:
        try:
            self._state = self.campaign.snapshot()
        except E.CampaignPersistenceError as exc:
            self._note_error(str(exc))
        return self._state

    def _monitor(self, state: CampaignState | None) -> Monitor:
        """The monitor for ``state`` (the tick's :meth:`_snapshot`)."""
        run = state.active_runs.get(self.run_id) if state is not None else None
        monitor = Monitor(
            run_id=self.run_id,
            observed_at_unix=time.time(),
            controller_pid=self.controller_pid,
            campaign_file=self.campaign.location if self.campaign.backend.kind == "file"
            else None,
            campaign_url=None if self.campaign.backend.kind == "file" else self.campaign.location,
            meter=MonitorMeter(
                source=self.meter.name if self.meter is not None else None,
                blindness_sec=self.blindness_sec,
                confirmed_age_sec=None if self._confirmed is None else self._age(),
                last_usage=self._last_usage,
                limit_remaining=self._limit_remaining,
                error=self._meter_error,
            ),
            meter_diagnostics=list(self._diagnostics),
            stop_reason=self._stop_reason,
        )
        if self.progress is not None:
            try:
                monitor.progress = self.progress()
            except Exception as exc:  # a diagnostic: the monitor is still written
                self._note_error(f"progress: {type(exc).__name__}: {exc}")
        if state is not None:
            monitor.ceiling_usd = state.ceiling_usd
            monitor.campaign_spent_usd = state.spent_usd
            monitor.campaign_remaining_usd = state.remaining_usd
            monitor.campaign_outstanding_usd = state.outstanding_usd
            monitor.campaign_available_usd = state.available_usd
            monitor.active_runs = len(state.active_runs)
        if run is not None:
            monitor.run_spent_usd = run.settled_usd
            monitor.run_outstanding_usd = run.outstanding_usd
            monitor.run_reservations = len(run.reservations)
        elif self._record is not None:
            monitor.run_spent_usd = self._record.settled_usd
            monitor.run_outstanding_usd = 0.0
        try:
            monitor.disk = check_disk(self.run_root, self.min_free_gb)
        except OSError:
            monitor.disk = None
        return monitor

    def _write(self, monitor: Monitor) -> None:
        try:
            write_monitor(self.run_root, monitor)
        except OSError as exc:  # a diagnostic: valid work continues
            report_write_failure(f"{self.run_root / 'monitor.json'}", exc)
