"""Pydantic models of the files the budget package writes: ``campaign.json`` and
``monitor.json``, plus the values its API returns.

Field names follow the seed's ``ouroboros.cowork_bench.campaign.v1`` where one exists
(``ceiling_usd``, ``usage_baseline``, ``prior_spend_usd``, ``last_usage``, ``spent_usd``,
``remaining_usd``, ``runs``); ``active_run`` became ``active_runs`` (a map keyed by run
id) because runs of one campaign may go on at the same time.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from harness.core.models import OpenModel as _Open
from harness.core.models import StrictModel as _Strict

CAMPAIGN_SCHEMA = "harness.campaign.v1"
MOVED_SCHEMA = "harness.campaign.moved.v1"
MONITOR_SCHEMA = "harness.monitor.v1"

# Known instance costs kept for the learned per-task reservation.
COST_HISTORY_LIMIT = 200


class ReservationEntry(_Strict):
    amount_usd: float
    reserved_at_unix: float
    worker_pid: int
    # The holds of dead attempts at this instance (runs taken over) it carries: settled with
    # it, merged into its cost on a reattach (one task), else charged as unknown cost.
    inherited_usd: float | None = None


class ActiveRun(_Strict):
    """Custody entry of a run that was admitted and has not finished (or crashed)."""

    run_id: str
    run_root: str
    pid: int
    host: str
    boot_id: str | None = None
    pid_start_ticks: int | None = None  # /proc/<pid>/stat field 22: guards against pid reuse
    admitted_at_unix: float
    usage_at_admission: float
    reservations: dict[str, ReservationEntry] = Field(default_factory=dict)
    settled: dict[str, float] = Field(default_factory=dict)  # key -> charged USD
    unknown_cost: list[str] = Field(default_factory=list)  # settled keys charged at reserve
    overran: list[str] = Field(default_factory=list)
    released: list[str] = Field(default_factory=list)
    refused: dict[str, str] = Field(default_factory=dict)  # key -> reason
    settled_usd: float = 0.0
    stop_reason: str | None = None
    # A resume (``--resume-from``) of a dead run takes its custody over: the runs it took
    # over (their kept sandboxes are this run's to settle) and their open reservations, held
    # until this run reserves the same instance again (a reattach) or finishes.
    took_over: list[str] = Field(default_factory=list)
    inherited: dict[str, ReservationEntry] = Field(default_factory=dict)
    # The runs it resumes (their run ids) when it took none of them over (their custody had
    # ended; otherwise ``took_over`` names them): a resume that dies before it holds anything
    # of its own passes its custody on to the next resume of the same runs. Written only
    # when given (every other entry is written as it always was).
    resumes: list[str] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _resumes_when_given(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if not self.resumes and isinstance(data, dict):
            data.pop("resumes", None)
        return data
    # What an instance of unknown cost is charged (``--unknown-cost-allowance-usd``).
    unknown_cost_allowance_usd: float | None = None
    # The lease the controller renews while it lives (:mod:`.custody`): an entry whose lease
    # expired is dead wherever it ran; one whose lease runs is live, even seen from another
    # machine. None on entries written before leases (then only this host can tell).
    lease_sec: float | None = None
    lease_expires_unix: float | None = None
    # The shard's identity across machines (``--custody-identity``, e.g. the workflow run and
    # the shard): a later run with the same identity takes a dead entry's custody over.
    identity: str | None = None

    @property
    def outstanding_usd(self) -> float:
        return math.fsum(r.amount_usd for r in self.reservations.values()) + math.fsum(
            r.amount_usd for r in self.inherited.values()
        )

    @property
    def custody_run_ids(self) -> list[str]:
        """Run ids whose Docker resources this entry answers for (its own, those taken over)."""
        return [self.run_id, *self.took_over]


class RunRecord(_Strict):
    """One finished (or reconciled) run, appended to ``runs``."""

    run_id: str
    run_root: str
    outcome: str
    admitted_at_unix: float
    finished_at_unix: float
    settled_usd: float
    settled_count: int
    unknown_cost_count: int
    overrun_count: int
    released_count: int
    refused_count: int
    abandoned_count: int = 0  # reservations left at the end, charged at their amount
    abandoned_usd: float = 0.0
    usage_at_admission: float
    final_usage: float
    metered_usd: float  # key usage delta over the run (includes concurrent runs' spend)
    meter_error: str | None = None
    reconciled: bool = False
    taken_over_by: str | None = None  # the resume that took this run's custody over
    unknown_cost_allowance_usd: float | None = None  # what an unknown cost was charged
    took_over: list[str] = Field(default_factory=list)


class CampaignState(_Strict):
    """``campaign.json``: shared by every run of a campaign; changed only under its lock."""

    schema_: str = Field(default=CAMPAIGN_SCHEMA, alias="schema")
    created_at_unix: float
    updated_at_unix: float
    ceiling_usd: float
    key_fingerprint: str
    usage_baseline: float
    prior_spend_usd: float = 0.0
    last_usage: float
    last_reading_at_unix: float | None = None  # request time of the last accepted reading
    limit_remaining: float | None = None
    settled_usd: float = 0.0  # every settled charge since creation, all runs
    # Settled charges of the time before a meter was added to a meterless campaign (the
    # meter's baseline is its first reading, so it cannot see them): counted in full.
    unmetered_usd: float = 0.0
    meter_added_at_unix: float | None = None
    # Derived on every write (for readers of the file): see accounting.spent_usd().
    spent_usd: float = 0.0
    outstanding_usd: float = 0.0
    remaining_usd: float = 0.0  # ceiling - spent
    available_usd: float = 0.0  # ceiling - spent - outstanding
    cost_history: list[float] = Field(default_factory=list)
    runs: list[RunRecord] = Field(default_factory=list)
    active_runs: dict[str, ActiveRun] = Field(default_factory=dict)


class CampaignMoved(_Strict):
    """What a campaign file holds once ``harness campaign migrate`` moved its campaign to
    PostgreSQL: where it went (the URL, password redacted) and the state as it was moved.
    A run or command given the file is refused, naming the URL (one ceiling, one store)."""

    schema_: str = Field(default=MOVED_SCHEMA, alias="schema")
    moved_to: str
    moved_at_unix: float
    campaign: CampaignState


class Reservation(_Strict):
    run_id: str
    key: str
    amount_usd: float
    campaign_spent_usd: float
    campaign_outstanding_usd: float  # including this reservation
    ceiling_usd: float
    run_spent_usd: float
    run_outstanding_usd: float


class Settlement(_Strict):
    run_id: str
    key: str
    reserved_usd: float
    charged_usd: float
    reported_cost_usd: float | None
    cost_known: bool
    overran: bool  # reported cost above the reservation: put budget_overrun in the row
    campaign_spent_usd: float
    campaign_outstanding_usd: float
    ceiling_usd: float
    run_spent_usd: float
    # What the dead attempts this instance did not reattach to were charged (unknown cost).
    earlier_charged_usd: float = 0.0


class MeterReading(_Strict):
    """One usage reading: the key's cumulative usage in USD."""

    usage: float
    requested_at_unix: float  # when the request was sent: blindness counts from here
    observed_at_unix: float
    limit_remaining: float | None = None
    source: str


class MeterDiagnostic(_Strict):
    observed_at_unix: float
    phase: Literal["poll", "final"]
    attempt: int
    previous_usage: float | None
    observed_usage: float | None  # None when the read failed or was not finite
    accepted: bool
    error_type: str | None = None
    error: str | None = None


class DiskStatus(_Strict):
    path: str
    free_bytes: int
    total_bytes: int
    min_free_bytes: int
    ok: bool


class MonitorMeter(_Strict):
    source: str | None
    blindness_sec: float
    confirmed_age_sec: float | None  # since the request of the last accepted, saved reading
    last_usage: float | None
    limit_remaining: float | None = None
    error: str | None = None


class RunProgress(_Open):
    """Where the run is: units selected, done (a row), running, left (neither yet)."""

    selected: int
    done: int
    running: int
    left: int
    by_outcome: dict[str, int] = Field(default_factory=dict)


class Monitor(_Open):
    """``monitor.json`` in the run root: live spend, reservations, meter, disk, stop reason."""

    schema_: str = Field(default=MONITOR_SCHEMA, alias="schema")
    run_id: str
    observed_at_unix: float
    controller_pid: int
    campaign_file: str | None = None
    campaign_url: str | None = None  # a PostgreSQL campaign, its password redacted
    ceiling_usd: float | None = None
    campaign_spent_usd: float | None = None
    campaign_remaining_usd: float | None = None
    campaign_outstanding_usd: float | None = None
    campaign_available_usd: float | None = None
    run_spent_usd: float | None = None
    run_outstanding_usd: float | None = None  # the seed's inflight_reserve_usd
    run_reservations: int = 0
    active_runs: int = 0
    meter: MonitorMeter
    progress: RunProgress | None = None  # refreshed while the run goes (issue 43)
    meter_diagnostics: list[MeterDiagnostic] = Field(default_factory=list)
    disk: DiskStatus | None = None
    stop_reason: str | None = None
    finished: bool = False
    runner_exit_code: int | None = None
    campaign_settlement: Literal["recorded", "unconfirmed"] | None = None
    # Why the run's custody stays in the campaign (cleanup could not prove its containers
    # and networks gone): ``harness campaign reconcile`` ends it once they are.
    custody_unsettled: str | None = None
