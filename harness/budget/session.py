"""The two faces the runner wires in: :class:`ControllerBudget` (once per run, in the
process that writes the ledger) and :class:`WorkerBudget` (in each xdist worker's
per-instance fixture). Both are built from :class:`BudgetSettings`, the parsed plugin
options, which the controller hands to workers as JSON (``to_json``/``from_json``).

Without ``--campaign-file`` (or ``--campaign-url``, a campaign in PostgreSQL shared by
runs on several machines) but with ``--budget-usd``, the run gets a campaign of its own,
``<run_root>/campaign.json`` with the run budget as ceiling, so its xdist workers still
share reservations. With neither, reservations are off (the disk reserve still applies).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.core.errors import RefusalError

from . import errors as E
from . import pgurl
from .custody import DEFAULT_LEASE_SEC
from .meter import METER_KEY_ENV, Meter, make_meter

if TYPE_CHECKING:  # the campaign and supervisor load when a budget starts, not at collection
    from .campaign import Campaign
    from .models import MeterReading, Monitor, Reservation, Settlement
    from .pgurl import CampaignUrl
    from .supervisor import MeterSupervisor

STAGE = "budget"


@dataclass(frozen=True)
class BudgetSettings:
    campaign_file: str | None = None  # --campaign-file
    campaign_url: str | None = None  # --campaign-url: postgresql://... or env:NAME
    campaign_budget_usd: float | None = None  # --campaign-budget-usd (needed to create)
    prior_spend_usd: float | None = None  # --prior-spend-usd (creation only)
    per_task_reserve_usd: float | None = None  # --per-task-reserve-usd (else none held)
    budget_reserve_usd: float = 0.0  # --budget-reserve-usd
    budget_usd: float | None = None  # --budget-usd (this run's own spend)
    meter: str = "none"  # --meter openrouter[=URL] | fake-file:PATH | none
    meter_blindness_sec: float = 30.0  # --meter-blindness-sec
    meter_poll_sec: float = 15.0
    meter_retry_sec: float = 3.0
    meter_read_timeout_sec: float = 5.0
    min_free_disk_gb: float | None = None  # --min-free-disk-gb (GiB)
    # --unknown-cost-allowance-usd: held for each instance in flight and charged for one
    # whose cost is unknown; a campaign without a meter needs it (else unknown costs are
    # unbounded: they would count as $0).
    unknown_cost_allowance_usd: float | None = None
    key_env: str = METER_KEY_ENV
    # --custody-identity: the shard's name across machines (a re-run with the same identity
    # takes a dead entry's custody over wherever it ran); --custody-lease-sec: its lease.
    custody_identity: str | None = None
    custody_lease_sec: float = DEFAULT_LEASE_SEC

    @property
    def reservations_enabled(self) -> bool:
        return (self.campaign_file is not None or self.campaign_url is not None
                or self.budget_usd is not None)

    @property
    def task_hold_usd(self) -> float:
        """What each instance holds while in flight: the explicit per-task reserve or the
        unknown-cost allowance, whichever is larger (0 without either)."""
        return max(self.per_task_reserve_usd or 0.0, self.unknown_cost_allowance_usd or 0.0)

    def campaign_path(self, run_root: str | os.PathLike[str]) -> Path:
        if self.campaign_file is not None:
            return Path(self.campaign_file).absolute()
        return Path(run_root).absolute() / "campaign.json"

    def campaign_where(self, run_root: str | os.PathLike[str],
                       environ: Mapping[str, str] | None = None) -> Path | CampaignUrl:
        """The campaign file, or the parsed ``--campaign-url`` (ValueError when unusable)."""
        if self.campaign_url is not None:
            return pgurl.parse(self.campaign_url, environ)
        return self.campaign_path(run_root)

    def campaign_url_record(self, environ: Mapping[str, str] | None = None) -> str | None:
        """``--campaign-url`` as the manifest records it: the URL, its password redacted
        (``env:NAME`` as given when that variable does not hold a usable URL)."""
        if self.campaign_url is None:
            return None
        try:
            return pgurl.parse(self.campaign_url, environ).redacted
        except ValueError:
            return self.campaign_url if self.campaign_url.startswith(pgurl.ENV_PREFIX) else None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> BudgetSettings:
        return cls(**json.loads(text))


def _refuse(reason: str, message: str) -> RefusalError:
    return RefusalError(message, stage=STAGE, reason=reason, exit_code=2)


class ControllerBudget:
    """Opens (or creates) the campaign, takes the baseline reading, admits the run,
    supervises the meter and settles the run at the end."""

    def __init__(self, campaign: Campaign, meter: Meter | None, supervisor: MeterSupervisor):
        self.campaign = campaign
        self.meter = meter
        self.supervisor = supervisor

    @classmethod
    def start(
        cls,
        settings: BudgetSettings,
        *,
        run_id: str,
        run_root: str | os.PathLike[str],
        pid: int | None = None,
        environ: Mapping[str, str] | None = None,
        on_stop: Callable[[str], None] | None = None,
        resumes: Sequence[str | os.PathLike[str]] = (),
        resumed_run_ids: Sequence[str] = (),
    ) -> ControllerBudget | None:
        """None when reservations are off. RefusalError (exit 2) when the run must not start.

        ``resumes``, ``resumed_run_ids``: the run roots this run resumes (nearest first) and
        their run ids (the run model's ancestry); a dead run among them that still holds
        custody is taken over instead of refusing the run (by its root, or by its run id
        when the root moved to another machine)."""
        from .supervisor import MeterSupervisor

        if not settings.reservations_enabled:
            return None
        if settings.campaign_file is not None and settings.campaign_url is not None:
            raise _refuse("campaign_options_conflict", "--campaign-file and --campaign-url "
                          "name two campaigns: pass one (harness campaign migrate FILE URL "
                          "moves a file's campaign to the URL)")
        try:
            where = settings.campaign_where(run_root, environ)
        except ValueError as exc:
            raise _refuse(E.CAMPAIGN_URL_UNUSABLE, str(exc)) from None
        meter, reading = _first_reading(settings, environ)
        campaign = _open_campaign(settings, where, meter, reading)
        _admit(campaign, settings, run_id, run_root, pid or os.getpid(), resumes,
               resumed_run_ids)
        supervisor = MeterSupervisor(
            campaign,
            run_id,
            run_root,
            meter,
            blindness_sec=settings.meter_blindness_sec,
            poll_sec=settings.meter_poll_sec,
            retry_sec=settings.meter_retry_sec,
            read_timeout_sec=settings.meter_read_timeout_sec,
            budget_reserve_usd=settings.budget_reserve_usd,
            min_free_gb=settings.min_free_disk_gb,
            on_stop=on_stop,
            controller_pid=pid,
            lease_sec=settings.custody_lease_sec,
        )
        return cls(campaign, meter, supervisor)

    def took_over(self, run_id: str) -> list[str]:
        """The runs whose custody this run took over (a resume of a dead run)."""
        try:
            entry = self.campaign.snapshot().active_runs.get(run_id)
        except E.CampaignPersistenceError:
            return []
        return list(entry.took_over) if entry is not None else []

    def finish(self, outcome: str, exit_code: int | None) -> Monitor:
        return self.supervisor.finish(outcome, exit_code)

    def keep_custody(self, outcome: str, exit_code: int | None, why: str) -> Monitor:
        return self.supervisor.keep_custody(outcome, exit_code, why)


def _first_reading(
    settings: BudgetSettings, environ: Mapping[str, str] | None
) -> tuple[Meter | None, MeterReading | None]:
    """The meter and its first reading; a ceiling with neither a meter nor an unknown-cost
    allowance is refused (``campaign_unmetered``)."""
    try:
        meter = make_meter(settings.meter, environ=environ, key_env=settings.key_env)
    except ValueError as exc:
        raise _refuse("meter_unusable", str(exc)) from exc
    reading = None
    if meter is not None:
        try:
            reading = meter.read(settings.meter_read_timeout_sec)
        except E.MeterError as exc:
            raise _refuse(E.BUDGET_METER_UNAVAILABLE, f"first meter reading failed: {exc}") from exc
    if meter is None and not settings.unknown_cost_allowance_usd:
        what = ("--unknown-cost-allowance-usd 0 without a meter counts"
                if settings.unknown_cost_allowance_usd is not None
                else "a money ceiling without a meter would count")
        raise _refuse(
            E.CAMPAIGN_UNMETERED,
            f"{what} every instance of unknown cost as $0: add --meter openrouter (or "
            "fake-file:PATH in tests), or --unknown-cost-allowance-usd USD above 0 "
            "(charged for each such instance)",
        )
    return meter, reading


def _open_campaign(settings: BudgetSettings, where: Path | CampaignUrl, meter: Meter | None,
                   reading: MeterReading | None) -> Campaign:
    """Open (or create, with ``--campaign-budget-usd``) the campaign and save the first
    reading."""
    from .campaign import Campaign

    ceiling = settings.campaign_budget_usd
    try:
        if settings.campaign_file is None and settings.campaign_url is None:
            ceiling = settings.budget_usd
        elif ceiling is None:
            existing = Campaign(where).backend.read()
            if existing is None:
                raise _refuse("campaign_budget_missing",
                              f"--campaign-budget-usd is needed to create campaign {where}")
            ceiling = existing.ceiling_usd
        assert ceiling is not None
        campaign = Campaign.open_or_create(
            where,
            ceiling_usd=ceiling,
            key_fingerprint=meter.fingerprint if meter is not None else "none",
            baseline_usage=reading.usage if reading is not None else 0.0,
            prior_spend_usd=settings.prior_spend_usd,
        )
    except E.CampaignPersistenceError as exc:
        if settings.campaign_url is None:
            raise
        from .pgstore import unreachable

        raise unreachable(exc) from None
    if reading is not None and not campaign.record_reading(reading):
        raise _refuse(
            E.BUDGET_METER_UNAVAILABLE,
            f"the meter reads {reading.usage!r}, below the campaign's last accepted reading",
        )
    return campaign


def _admit(campaign: Campaign, settings: BudgetSettings, run_id: str,
           run_root: str | os.PathLike[str], pid: int,
           resumes: Sequence[str | os.PathLike[str]], resumed_run_ids: Sequence[str]) -> None:
    """Admit the run. A live lease under this run's identity (the shard's earlier attempt,
    whose machine went away less than a lease ago) is waited out, with a line to stderr
    every 15 s, for at most the lease's length and 30 s more; then refused."""
    deadline = time.monotonic() + settings.custody_lease_sec + 30.0
    said = 0.0
    while True:
        try:
            campaign.admit_run(
                run_id, run_root, pid, resumes=resumes, resumed_run_ids=resumed_run_ids,
                unknown_cost_allowance_usd=settings.unknown_cost_allowance_usd,
                identity=settings.custody_identity, lease_sec=settings.custody_lease_sec,
            )
            return
        except RefusalError as exc:
            if exc.reason != E.CAMPAIGN_LEASE_LIVE or time.monotonic() > deadline:
                raise
            if time.monotonic() - said >= 15.0:
                said = time.monotonic()
                print(f"harness: waiting for the lease of {settings.custody_identity} to "
                      f"expire: {exc}", file=sys.stderr, flush=True)
            time.sleep(min(2.0, settings.custody_lease_sec / 4))


class WorkerBudget:
    """Per-instance reservations in any process (xdist worker or the single process)."""

    def __init__(self, settings: BudgetSettings, run_id: str, run_root: str | os.PathLike[str]):
        from .campaign import Campaign

        self.settings = settings
        self.run_id = run_id
        self.run_root = Path(run_root)
        self.campaign = (
            Campaign(settings.campaign_where(run_root)) if settings.reservations_enabled
            else None
        )

    def reserve(self, key: str) -> Reservation | None:
        """Before the instance starts; raises BudgetRefused (``disk_reserve`` included)."""
        from .disk import check_disk

        disk = check_disk(self.run_root, self.settings.min_free_disk_gb)
        if not disk.ok:
            raise E.BudgetRefused(
                E.DISK_RESERVE,
                f"{disk.path} has {disk.free_bytes / 2**30:.1f} GiB free, "
                f"below --min-free-disk-gb {self.settings.min_free_disk_gb:g}",
            )
        if self.campaign is None:
            return None
        return self.campaign.reserve(
            self.run_id,
            key,
            self.settings.task_hold_usd,
            budget_reserve_usd=self.settings.budget_reserve_usd,
            run_budget_usd=self.settings.budget_usd,
        )

    def settle(self, key: str, cost_usd: float | None, cost_known: bool, *,
               reattached: bool = False,
               earlier_cost_usd: float | None = None) -> Settlement | None:
        """``reattached``: the instance continued the task of a dead attempt (whose hold a
        resume took over), so its cost covers that attempt; otherwise that attempt is
        charged as unknown cost (see :meth:`Campaign.settle`)."""
        if self.campaign is None:
            return None
        return self.campaign.settle(self.run_id, key, cost_usd, cost_known,
                                    reattached=reattached, earlier_cost_usd=earlier_cost_usd)

    def release(self, key: str) -> None:
        if self.campaign is not None:
            self.campaign.release(self.run_id, key)
