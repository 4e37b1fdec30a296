"""Campaign budget: a shared campaign (a file, or a PostgreSQL row shared by runners on
several machines) with cross-process reservations, a usage meter with a supervisor, custody
of runs, and the disk reserve.

API
---
``Campaign.open_or_create(where, *, ceiling_usd, key_fingerprint, baseline_usage,
prior_spend_usd=None) -> Campaign``
    ``where``: a file path, a ``postgresql://...?campaign=NAME`` URL or ``env:NAME``
    (:mod:`.pgurl`), or a backend (:mod:`.store`: ``CampaignBackend``, the file and
    PostgreSQL stores share every rule). ``campaign.location`` names it (a URL with its
    password redacted), ``campaign.path`` is the file of a file campaign.
    Create ``campaign.json`` or open it; a changed ceiling, key or prior spend is a
    RefusalError (reasons ``campaign_ceiling_changed``, ``campaign_key_changed``,
    ``campaign_prior_spend_fixed``). ``baseline_usage`` counts only at creation.
``campaign.admit_run(run_id, run_root, pid, *, resumes=(), unknown_cost_allowance_usd=None)
-> ActiveRun``
    Custody. RefusalError ``campaign_stale_run`` (naming the run and its resume) while the
    entry of a dead process exists, unless it is a run this one resumes (``resumes``: the
    ancestors' roots): then its custody is taken over (``took_over``, its open holds as
    ``inherited``, its record ``taken_over_by``); live concurrent runs are fine; idempotent
    for the same pid.
``campaign.reserve(run_id, key, amount_usd=0, *, budget_reserve_usd=0,
run_budget_usd=None) -> Reservation``
    Before an instance starts. ``BudgetRefused(reason)``: ``campaign_budget``,
    ``run_budget``, a stop reason the controller set, or ``campaign_persistence_failed``.
    ``amount_usd`` is the explicit per-task reserve (never learned or automatic).
``campaign.settle(run_id, key, cost_usd, cost_known, *, reattached=False,
earlier_cost_usd=None) -> Settlement``
    After it ran: ``Settlement.overran`` -> ``budget_overrun: true`` in the row. A hold taken
    over from a dead attempt is merged only when the instance ``reattached`` to its task;
    otherwise that attempt is charged as unknown cost (``Settlement.earlier_charged_usd``).
``campaign.release(run_id, key)``
    It did not run: reservation dropped, cost 0 (a dead attempt it carried is charged).
``campaign.record_reading(reading) -> bool``, ``campaign.request_stop(run_id, reason)``,
``campaign.finish_run(run_id, outcome, final_reading=None, *, meter_error=None) -> RunRecord``,
``campaign.reconcile_run(run_id, reading_usage)``, ``campaign.snapshot() -> CampaignState``.

``MeterSupervisor(campaign, run_id, run_root, meter, *, blindness_sec=30, poll_sec=15,
retry_sec=3, read_timeout_sec=5, budget_reserve_usd=0, min_free_gb=None, on_stop=None)``
    ``.poll() -> stop_reason | None`` (or ``.start()`` a thread), ``.finish(outcome,
    runner_exit_code) -> Monitor``; keeps ``<run_root>/monitor.json``.
``make_meter(spec) -> Meter | None`` (``openrouter[=URL]``, ``none``, a registered scheme:
``fake-file:PATH`` once the test double :mod:`harness.testing.fake_meter` is loaded),
``register_meter``, ``key_fingerprint(secret)``, ``check_disk(path, min_free_gb) -> DiskStatus``,
``write_monitor(run_root, monitor)``, ``campaign_command(argv) -> int`` (``harness campaign
show|reconcile|migrate``; :func:`.migrate.migrate` moves a file's campaign to a URL).

Wiring: ``BudgetSettings`` (the plugin options), ``ControllerBudget.start(settings, *,
run_id, run_root, pid=None, environ=None, on_stop=None, resumes=())`` in the controller
(refusals before any instance, ``campaign_unmetered`` for a ceiling with neither a meter
nor an ``--unknown-cost-allowance-usd`` above 0; ``.supervisor.start()``,
``.finish(outcome, exit_code)``) and ``WorkerBudget(settings, run_id, run_root)`` in the
per-instance fixture (``.reserve(key)`` with the disk reserve, ``.settle(key, cost, known,
*, reattached, earlier_cost_usd)``: from the agent's outcome, ``AgentOutcome.reattached``
and ``.earlier_cost_usd``; ``.release(key)``).

Spend: ``spent = prior + max(meter delta, settled charges)``; see :mod:`.accounting`.
All errors and reason codes: :mod:`.errors`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.core.lazy import lazy_exports

if TYPE_CHECKING:
    from .campaign import Campaign
    from .disk import check_disk
    from .errors import (
        BUDGET_METER_UNAVAILABLE,
        CAMPAIGN_BUDGET,
        CAMPAIGN_PERSISTENCE_FAILED,
        DISK_RESERVE,
        RUN_BUDGET,
        BudgetRefused,
        CampaignPersistenceError,
        CampaignStateError,
        MeterError,
    )
    from .meter import (
        METER_KEY_ENV,
        Meter,
        OpenRouterKeyMeter,
        key_fingerprint,
        make_meter,
        register_meter,
    )
    from .models import (
        ActiveRun,
        CampaignState,
        DiskStatus,
        MeterReading,
        Monitor,
        Reservation,
        RunRecord,
        Settlement,
    )
    from .monitor import read_monitor, write_monitor
    from .reconcile import campaign_command
    from .session import BudgetSettings, ControllerBudget, WorkerBudget
    from .supervisor import MeterSupervisor

# Loaded on first use (PEP 562): importing one submodule does not import them all
# (the collection path stays off Docker and the heavy models).
_LAZY = {
    "Campaign": "harness.budget.campaign",
    "check_disk": "harness.budget.disk",
    "BUDGET_METER_UNAVAILABLE": "harness.budget.errors",
    "CAMPAIGN_BUDGET": "harness.budget.errors",
    "CAMPAIGN_PERSISTENCE_FAILED": "harness.budget.errors",
    "DISK_RESERVE": "harness.budget.errors",
    "RUN_BUDGET": "harness.budget.errors",
    "BudgetRefused": "harness.budget.errors",
    "CampaignPersistenceError": "harness.budget.errors",
    "CampaignStateError": "harness.budget.errors",
    "MeterError": "harness.budget.errors",
    "METER_KEY_ENV": "harness.budget.meter",
    "Meter": "harness.budget.meter",
    "OpenRouterKeyMeter": "harness.budget.meter",
    "key_fingerprint": "harness.budget.meter",
    "make_meter": "harness.budget.meter",
    "register_meter": "harness.budget.meter",
    "ActiveRun": "harness.budget.models",
    "CampaignState": "harness.budget.models",
    "DiskStatus": "harness.budget.models",
    "MeterReading": "harness.budget.models",
    "Monitor": "harness.budget.models",
    "Reservation": "harness.budget.models",
    "RunRecord": "harness.budget.models",
    "Settlement": "harness.budget.models",
    "read_monitor": "harness.budget.monitor",
    "write_monitor": "harness.budget.monitor",
    "campaign_command": "harness.budget.reconcile",
    "BudgetSettings": "harness.budget.session",
    "ControllerBudget": "harness.budget.session",
    "WorkerBudget": "harness.budget.session",
    "MeterSupervisor": "harness.budget.supervisor",
}


__getattr__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "BUDGET_METER_UNAVAILABLE",
    "CAMPAIGN_BUDGET",
    "CAMPAIGN_PERSISTENCE_FAILED",
    "DISK_RESERVE",
    "METER_KEY_ENV",
    "RUN_BUDGET",
    "ActiveRun",
    "BudgetRefused",
    "BudgetSettings",
    "Campaign",
    "CampaignPersistenceError",
    "CampaignState",
    "CampaignStateError",
    "ControllerBudget",
    "DiskStatus",
    "Meter",
    "MeterError",
    "MeterReading",
    "MeterSupervisor",
    "Monitor",
    "OpenRouterKeyMeter",
    "Reservation",
    "RunRecord",
    "Settlement",
    "WorkerBudget",
    "campaign_command",
    "check_disk",
    "key_fingerprint",
    "make_meter",
    "read_monitor",
    "register_meter",
    "write_monitor",
]
