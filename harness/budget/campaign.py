"""The campaign: one document shared by every run (and xdist worker) of a campaign,
changed only by read-modify-write transactions of its backend (:mod:`.store`): a JSON file
under an fcntl lock, or a PostgreSQL row (one SERIALIZABLE transaction each). See the
package docstring for the API and :mod:`.accounting` for the rule.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Sequence

from . import accounting, custody
from . import errors as E
from .models import (
    ActiveRun,
    CampaignState,
    MeterReading,
    Reservation,
    ReservationEntry,
    RunRecord,
    Settlement,
)
from .store import CampaignStore, refuse, seal


def _root_key(root: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.fspath(root))


_RETRY_SUFFIX = re.compile(r"#retry[1-9][0-9]*$")  # an instance id never holds '#'


def try_key(key: str, retries: int) -> str:
    """The reservation key of one try of instance ``key`` in a run: the key for its first
    try, ``<key>#retry<n>`` for its n-th infrastructure retry (``--retry-infra``). A key is
    reserved and settled once, so each try holds and is charged on its own."""
    return key if not retries else f"{key}#retry{retries}"


def instance_of(key: str) -> str:
    """The instance of a try's reservation key (:func:`try_key`)."""
    return _RETRY_SUFFIX.sub("", key)


class Campaign(CampaignStore):
    """A campaign and the operations every run performs on it (see the package doc)."""

    @staticmethod
    def _run(state: CampaignState, run_id: str) -> ActiveRun:
        run = state.active_runs.get(run_id)
        if run is None:
            raise E.CampaignStateError(f"run {run_id} holds no custody in this campaign")
        return run

    # ---------------------------------------------------------------- custody

    def stale_runs(self) -> list[ActiveRun]:
        state = self.snapshot()
        return [r for r in state.active_runs.values() if custody.liveness(r) == "dead"]

    def admit_run(
        self,
        run_id: str,
        run_root: str | os.PathLike[str],
        pid: int,
        *,
        resumes: Sequence[str | os.PathLike[str]] = (),
        resumed_run_ids: Sequence[str] = (),
        unknown_cost_allowance_usd: float | None = None,
        identity: str | None = None,
        lease_sec: float = custody.DEFAULT_LEASE_SEC,
    ) -> ActiveRun:
        """Register custody for ``run_id`` (the controller's ``pid``), with a lease of
        ``lease_sec`` the controller renews (:meth:`renew_lease`).

        A dead entry (:func:`custody.liveness`) is taken over (its open reservations and
        kept sandboxes become this run's; its record says ``taken_over_by``) when this run
        resumes it (``resumes``: the ancestors' run roots, ``resumed_run_ids``: their run
        ids, which hold on another machine too) or carries its ``identity`` (the shard's
        re-run), and when it is an earlier resume of one of those ancestors that died before
        it settled or held anything of its own (killed while it was admitted: its selection
        never frozen, so it cannot be resumed; the holds it took over pass on). A dead entry
        with an identity of its own is left for its re-run (its holds still count). Any
        other dead entry refuses the run (``campaign_stale_run``, naming it: a resume that
        ran units is a fork, and resuming its ancestor again would pay for them twice); a
        live entry with this run's identity refuses it (``campaign_lease_live``: the caller
        may wait for the lease). Admitting the same run id again from the same pid returns
        the existing entry.
        """
        ident = custody.identify(pid)
        ancestors = {_root_key(root) for root in resumes}

        def ours(entry: ActiveRun, known: set[str]) -> bool:
            return (_root_key(entry.run_root) in ancestors or entry.run_id in resumed_run_ids
                    or (identity is not None and entry.identity == identity)
                    or (not entry.reservations and not entry.settled
                        and bool(known.intersection([*entry.took_over, *entry.resumes]))))

        def change(state: CampaignState) -> ActiveRun:
            roots = [(r.run_id, r.run_root) for r in state.runs] + [
                (r.run_id, r.run_root) for r in state.active_runs.values()]
            known = {*resumed_run_ids,
                     *(rid for rid, root in roots if _root_key(root) in ancestors)}
            taken: list[ActiveRun] = []
            for entry in state.active_runs.values():
                if entry.run_id == run_id:
                    if entry.pid == pid and entry.host == ident.host:
                        return entry
                    raise refuse(
                        E.CAMPAIGN_RUN_ID_IN_USE,
                        f"{custody.describe(entry)} already holds custody under this run id",
                    )
                life = custody.liveness(entry)
                if life != "dead":
                    if identity is not None and entry.identity == identity:
                        raise refuse(E.CAMPAIGN_LEASE_LIVE, f"{custody.describe(entry)} "
                                     "still holds this shard's custody")
                    continue
                if ours(entry, known):
                    taken.append(entry)
                elif entry.identity is None:
                    raise self._stale(entry)
            now = time.time()
            entry = ActiveRun(
                run_id=run_id, run_root=str(run_root), pid=pid, host=ident.host,
                boot_id=ident.boot_id, pid_start_ticks=ident.start_ticks,
                admitted_at_unix=now, usage_at_admission=state.last_usage,
                unknown_cost_allowance_usd=unknown_cost_allowance_usd,
                lease_sec=lease_sec, lease_expires_unix=now + lease_sec,
                identity=identity, resumes=[] if taken else sorted(known),
            )
            for old in taken:
                self._take_over(state, entry, old)
            state.active_runs[run_id] = entry
            return entry

        return self._mutate(change)

    def _stale(self, entry: ActiveRun) -> Exception:
        return refuse(
            E.CAMPAIGN_STALE_RUN,
            f"campaign {self.location} has a stale custody entry: "
            f"{custody.describe(entry)} is not running. Resume it "
            f"(--resume-from {entry.run_root}: the resume takes its custody over), "
            f"or check it left nothing behind and run: harness campaign reconcile "
            f"{self.cli_arg} --run {entry.run_root} [--reading USD]",
        )

    def _take_over(self, state: CampaignState, entry: ActiveRun, old: ActiveRun) -> None:
        entry.took_over += [old.run_id, *old.took_over]
        # held per instance, whichever try was in flight: the resume's try of the instance
        # takes the hold over (reserve) and may reattach to its task
        for key, held in [*old.inherited.items(), *old.reservations.items()]:
            entry.inherited[instance_of(key)] = held
        old.inherited.clear()
        old.reservations.clear()
        record = self._close(state, old, "taken_over", charge_leftovers=False, meter_error=None)
        record.taken_over_by = entry.run_id

    def renew_lease(self, run_id: str) -> float:
        """Push the run's lease forward by its length; returns the new expiry. Raises
        CampaignStateError (``campaign_lease_lost``) when the entry is gone (taken over or
        reconciled) or its lease already expired: another machine may hold it now."""

        def change(state: CampaignState) -> float:
            run = state.active_runs.get(run_id)
            if run is None:
                raise E.CampaignStateError(
                    f"{E.CAMPAIGN_LEASE_LOST}: run {run_id} holds no custody any more "
                    "(taken over or reconciled)")
            left = custody.lease_left(run)
            if left is not None and left <= 0:
                raise E.CampaignStateError(
                    f"{E.CAMPAIGN_LEASE_LOST}: run {run_id}'s lease expired {-left:.0f} s ago "
                    "(the campaign could not be reached in time): its custody may be taken "
                    "over")
            run.lease_expires_unix = time.time() + (run.lease_sec or custody.DEFAULT_LEASE_SEC)
            return run.lease_expires_unix

        return self._mutate(change)

    def request_stop(self, run_id: str, reason: str) -> None:
        """Mark the run stopped: every later ``reserve`` of it is refused with ``reason``."""

        def change(state: CampaignState) -> None:
            run = self._run(state, run_id)
            run.stop_reason = run.stop_reason or reason

        self._mutate(change)

    # ----------------------------------------------------------- reservations

    def learned_reserve_usd(
        self, *, safety_factor: float = 1.5, min_samples: int = 5
    ) -> float | None:
        state = self.snapshot()
        return accounting.learned_reserve(
            state.cost_history, safety_factor=safety_factor, min_samples=min_samples
        )

    def reserve(
        self,
        run_id: str,
        key: str,
        amount_usd: float = 0.0,
        *,
        budget_reserve_usd: float = 0.0,
        run_budget_usd: float | None = None,
    ) -> Reservation:
        """Admit instance ``key`` before it starts, holding ``amount_usd`` for it.

        The amount is the explicit ``--per-task-reserve-usd`` (0 without it: a per-task
        limit is never reserved automatically); ``budget_reserve_usd`` is the run's one
        allowance for delayed charges, independent of how many instances are in flight.
        Raises BudgetRefused(reason) when it does not fit, or when the run was stopped.
        """

        def change(state: CampaignState) -> tuple[Reservation | None, str | None]:
            run = self._run(state, run_id)
            left = custody.lease_left(run)
            if left is not None and left <= 0 and run.stop_reason is None:
                run.stop_reason = E.CAMPAIGN_LEASE_LOST  # another machine may take it over
            if key in run.reservations or key in run.settled:
                raise E.CampaignStateError(f"instance {key} of run {run_id} is already reserved")
            amount = amount_usd
            if not accounting.is_money(amount):
                raise ValueError(f"reservation must be a finite amount >= 0, got {amount!r}")
            # The instance a run taken over left in flight: its hold covers this attempt's
            # (a reattach continues that task) and stays on record until the settlement
            # says whether it did (:meth:`settle`).
            held = run.inherited.pop(key, None)
            inherited = None
            if held is not None:
                amount = max(amount, held.amount_usd)
                inherited = held.amount_usd + (held.inherited_usd or 0.0)
            reason = run.stop_reason or accounting.admission_refusal(
                state,
                run,
                amount,
                budget_reserve_usd=budget_reserve_usd,
                run_budget_usd=run_budget_usd,
            )
            if reason is not None:
                if held is not None:
                    run.inherited[key] = held  # still held until this run finishes
                run.refused[key] = reason
                return None, reason
            run.refused.pop(key, None)
            run.reservations[key] = ReservationEntry(
                amount_usd=amount, reserved_at_unix=time.time(), worker_pid=os.getpid(),
                inherited_usd=inherited,
            )
            return (
                Reservation(
                    run_id=run_id,
                    key=key,
                    amount_usd=amount,
                    campaign_spent_usd=accounting.spent_usd(state),
                    campaign_outstanding_usd=accounting.outstanding_usd(state),
                    ceiling_usd=state.ceiling_usd,
                    run_spent_usd=run.settled_usd,
                    run_outstanding_usd=run.outstanding_usd,
                ),
                None,
            )

        try:
            reservation, reason = self._mutate(change)
        except E.CampaignPersistenceError as exc:
            raise E.BudgetRefused(E.CAMPAIGN_PERSISTENCE_FAILED, str(exc)) from exc
        if reservation is None:
            assert reason is not None
            raise E.BudgetRefused(reason, f"instance {key} refused: {reason}")
        return reservation

    def settle(
        self,
        run_id: str,
        key: str,
        cost_usd: float | None,
        cost_known: bool,
        *,
        reattached: bool = False,
        earlier_cost_usd: float | None = None,
    ) -> Settlement:
        """Replace the reservation of ``key`` by the instance's reported cost.

        An unknown cost (``cost_known`` False, or no finite cost) is charged at the
        reservation (or the partial cost, if larger). ``overran`` is True when the
        reported cost exceeds the reservation. When the reservation carries the hold of a
        dead attempt (a run taken over), a ``reattached`` instance continued that very task,
        whose reported cost covers it; otherwise that attempt is charged as an unknown cost
        (its hold, the allowance or ``earlier_cost_usd``, what its tasks reported, whichever
        is largest; ``Settlement.earlier_charged_usd``). Raises CampaignPersistenceError.
        """

        def change(state: CampaignState) -> Settlement:
            run = self._run(state, run_id)
            entry = run.reservations.pop(key, None)
            if entry is None:
                raise E.CampaignStateError(f"instance {key} of run {run_id} holds no reservation")
            known = cost_known and accounting.is_money(cost_usd)
            allowance = run.unknown_cost_allowance_usd or 0.0
            charged = accounting.charge_for(entry.amount_usd, cost_usd, cost_known, allowance)
            earlier = 0.0
            if entry.inherited_usd is not None and not reattached:
                earlier = accounting.charge_for(
                    entry.inherited_usd, earlier_cost_usd, False, allowance
                )
            over = accounting.overran(entry.amount_usd, cost_usd)
            run.settled[key] = charged + earlier
            run.settled_usd += charged + earlier
            state.settled_usd += charged + earlier
            if known:
                accounting.remember_cost(state, charged)
            if not known or earlier:
                run.unknown_cost.append(key)
            if over:
                run.overran.append(key)
            return Settlement(
                run_id=run_id,
                key=key,
                reserved_usd=entry.amount_usd,
                charged_usd=charged,
                reported_cost_usd=cost_usd if cost_usd is None or math.isfinite(cost_usd) else None,
                cost_known=known,
                overran=over,
                campaign_spent_usd=accounting.spent_usd(state),
                campaign_outstanding_usd=accounting.outstanding_usd(state),
                ceiling_usd=state.ceiling_usd,
                run_spent_usd=run.settled_usd,
                earlier_charged_usd=earlier,
            )

        return self._mutate(change)

    def release(self, run_id: str, key: str) -> None:
        """Drop the reservation of an instance that did not run (cost 0); the dead attempts
        it carried (a run taken over) are charged as unknown cost."""

        def change(state: CampaignState) -> None:
            run = self._run(state, run_id)
            entry = run.reservations.pop(key, None)
            if entry is None:
                raise E.CampaignStateError(f"instance {key} of run {run_id} holds no reservation")
            run.released.append(key)
            if entry.inherited_usd is not None:
                earlier = accounting.charge_for(
                    entry.inherited_usd, None, False, run.unknown_cost_allowance_usd or 0.0
                )
                run.settled[key] = earlier
                run.settled_usd += earlier
                state.settled_usd += earlier
                run.unknown_cost.append(key)

        self._mutate(change)

    # ---------------------------------------------------------------- meter

    def record_reading(self, reading: MeterReading) -> bool:
        """Save an acceptable reading at once; False when rejected (nothing saved).

        Raises CampaignPersistenceError when the save fails.
        """

        def change(state: CampaignState | None) -> tuple[bool, CampaignState | None]:
            if state is None:
                raise E.CampaignPersistenceError(f"campaign {self.location} does not exist")
            if accounting.reading_rejection(reading.usage, state.last_usage) is not None:
                return False, None
            self._accept(state, reading)
            seal(state)
            return True, state

        return self.backend.transact(change)

    @staticmethod
    def _accept(state: CampaignState, reading: MeterReading) -> None:
        state.last_usage = reading.usage
        state.last_reading_at_unix = reading.requested_at_unix
        state.limit_remaining = reading.limit_remaining

    # ------------------------------------------------------------- settlement

    def finish_run(
        self,
        run_id: str,
        outcome: str,
        final_reading: MeterReading | None = None,
        *,
        meter_error: str | None = None,
    ) -> RunRecord:
        """Record the final reading (if acceptable), append the run record, end custody.

        Reservations still open (a worker crashed mid-instance) are charged at their
        amount, as unknown costs.
        """

        def change(state: CampaignState) -> RunRecord:
            run = self._run(state, run_id)
            if final_reading is not None and (
                accounting.reading_rejection(final_reading.usage, state.last_usage) is None
            ):
                self._accept(state, final_reading)
            return self._close(state, run, outcome, charge_leftovers=True, meter_error=meter_error)

        return self._mutate(change)

    def reconcile_run(self, run_id: str, reading_usage: float | None) -> RunRecord:
        """End the custody of a dead run (the caller proved no container is left).

        With the operator's reading (the key's cumulative usage, as ``data.usage``) the
        meter covers what the crashed instances spent, so their reservations are dropped;
        without one they are charged at their amount.
        """

        def change(state: CampaignState) -> RunRecord:
            run = self._run(state, run_id)
            if custody.liveness(run) == "alive":
                raise refuse(E.CAMPAIGN_STALE_RUN, f"{custody.describe(run)} is still running")
            if reading_usage is not None:
                rejection = accounting.reading_rejection(reading_usage, state.last_usage)
                if rejection is not None:
                    raise refuse("campaign_reading_rejected", f"--reading refused: {rejection}")
                now = time.time()
                self._accept(
                    state,
                    MeterReading(
                        usage=reading_usage,
                        requested_at_unix=now,
                        observed_at_unix=now,
                        source="operator",
                    ),
                )
            record = self._close(
                state, run, "reconciled", charge_leftovers=reading_usage is None, meter_error=None
            )
            record.reconciled = True
            return record

        return self._mutate(change)

    @staticmethod
    def _close(
        state: CampaignState,
        run: ActiveRun,
        outcome: str,
        *,
        charge_leftovers: bool,
        meter_error: str | None,
    ) -> RunRecord:
        allowance = run.unknown_cost_allowance_usd or 0.0
        abandoned = [  # an attempt of unknown cost, plus the dead ones it carried
            (key, max(entry.amount_usd, allowance) + (entry.inherited_usd or 0.0))
            for key, entry in [*run.reservations.items(), *run.inherited.items()]
        ]
        abandoned_usd = math.fsum(amount for _, amount in abandoned)
        if charge_leftovers:
            for key, amount in abandoned:
                run.settled[key] = amount
                run.unknown_cost.append(key)
            run.settled_usd += abandoned_usd
            state.settled_usd += abandoned_usd
        else:
            run.released.extend(key for key, _ in abandoned)
        run.reservations.clear()
        run.inherited.clear()
        record = RunRecord(
            run_id=run.run_id,
            run_root=run.run_root,
            outcome=outcome,
            admitted_at_unix=run.admitted_at_unix,
            finished_at_unix=time.time(),
            settled_usd=run.settled_usd,
            settled_count=len(run.settled),
            unknown_cost_count=len(run.unknown_cost),
            overrun_count=len(run.overran),
            released_count=len(run.released),
            refused_count=len(run.refused),
            abandoned_count=len(abandoned),
            abandoned_usd=abandoned_usd,
            usage_at_admission=run.usage_at_admission,
            final_usage=state.last_usage,
            metered_usd=max(0.0, state.last_usage - run.usage_at_admission),
            meter_error=meter_error,
            took_over=list(run.took_over),
            unknown_cost_allowance_usd=run.unknown_cost_allowance_usd,
        )
        state.runs.append(record)
        del state.active_runs[run.run_id]
        return record
