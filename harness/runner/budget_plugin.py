"""pytest wiring of campaign budgets (options: :mod:`harness.runner.options`): controller
admission and meter supervision, and the per-instance reservation (an autouse fixture that
is a no-op unless enabled)."""

from __future__ import annotations

import os
import sys
from collections.abc import Generator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest

from harness.budget.errors import BudgetRefused, CampaignPersistenceError
from harness.budget.session import BudgetSettings, ControllerBudget, WorkerBudget
from harness.core.errors import InfraError, RefusalError
from harness.core.outcomes import Outcome
from harness.core.signals import request_stop
from harness.runner.options import read_once
from harness.runner.worker import CONTROLLER_KEY, STATE_KEY

if TYPE_CHECKING:  # loaded when a run starts, not at collection
    from harness.runner.instance import RunContext

BUDGET_KEY = pytest.StashKey[ControllerBudget]()
SETTINGS_KEY = pytest.StashKey[BudgetSettings]()
FLOAT_OPTIONS = ("campaign_budget_usd", "prior_spend_usd", "per_task_reserve_usd",
                 "budget_reserve_usd", "budget_usd", "meter_blindness_sec", "meter_poll_sec",
                 "meter_read_timeout_sec", "min_free_disk_gb", "unknown_cost_allowance_usd",
                 "custody_lease_sec")


def settings_from(config: pytest.Config) -> BudgetSettings:
    """The budget options, parsed and validated once per process."""
    return read_once(config, SETTINGS_KEY, _parse_settings)


def _parse_settings(config: pytest.Config) -> BudgetSettings:
    # each number was checked when parsed (harness.runner.options: a finite number >= 0,
    # the custody lease at least 4); what is judged with another option is refused here
    values: dict[str, Any] = {}
    for name in FLOAT_OPTIONS:
        raw = config.getoption(name)
        if raw is not None:
            values[name] = float(raw)
    settings = BudgetSettings(campaign_file=config.getoption("campaign_file"),
                              campaign_url=config.getoption("campaign_url"),
                              meter=config.getoption("meter"),
                              custody_identity=config.getoption("custody_identity"), **values)
    bound = settings.meter_poll_sec + settings.meter_read_timeout_sec
    if settings.meter != "none" and settings.meter_blindness_sec <= bound:
        raise RefusalError(
            f"--meter-blindness-sec {settings.meter_blindness_sec:g} must exceed "
            f"--meter-poll-sec + --meter-read-timeout-sec ({bound:g}); raise it",
            stage="options", reason="bad_budget_option")
    return replace(settings, meter_retry_sec=min(settings.meter_retry_sec,
                                                 settings.meter_poll_sec))


def admit_budget(config: pytest.Config, run: RunContext) -> None:
    settings = settings_from(config)
    controller = config.stash[CONTROLLER_KEY]
    dry = run.dry_run  # a dry run spends nothing: it never creates or changes a campaign
    if run.manifest is not None:
        from harness.core.models import BudgetRecord

        run.manifest.extra.budget = BudgetRecord(
            enabled=settings.reservations_enabled and not dry,
            dry_run_untouched=dry,
            campaign_file=str(settings.campaign_path(run.run_root))
            if settings.reservations_enabled and settings.campaign_url is None else None,
            budget_usd=settings.budget_usd,
            per_task_reserve_usd=settings.per_task_reserve_usd,
            unknown_cost_allowance_usd=settings.unknown_cost_allowance_usd,
            budget_reserve_usd=settings.budget_reserve_usd,
            meter=settings.meter.split("=", 1)[0],
            meter_blindness_sec=settings.meter_blindness_sec,
            min_free_disk_gb=settings.min_free_disk_gb,
        )
        if settings.campaign_url is not None:  # recorded with its password redacted
            run.manifest.extra.budget.campaign_url = settings.campaign_url_record()
    if dry:
        return

    def on_stop(reason: str) -> None:
        controller.request_stop(reason, interrupt=True)

    try:
        ancestors = run.ancestry.manifests if run.ancestry is not None else []
        cb = ControllerBudget.start(settings, run_id=run.run_id, run_root=run.run_root,
                                    on_stop=on_stop, resumes=run.plan.ancestors,
                                    resumed_run_ids=[m.run_id for m in ancestors])
    except ValueError as exc:
        raise RefusalError(str(exc), stage="budget", reason="bad_budget_option") from exc
    if cb is None:
        return
    config.stash[BUDGET_KEY] = cb
    cb.supervisor.progress = controller.run_progress  # monitor.json: progress too
    controller.budget_monitor = True
    cb.supervisor.start()


@pytest.hookimpl(trylast=True)  # after the sandbox layer's final sweep
def pytest_harness_session_finish(config: pytest.Config, run: RunContext,
                                  summary: dict[str, Any]) -> None:
    cb = config.stash.get(BUDGET_KEY, None)
    if cb is None:
        return
    unproven = cleanup_unproven(run.run_id, run.run_root, took_over=cb.took_over(run.run_id),
                                ancestors=run.plan.ancestors,
                                campaign_file=cb.campaign.cli_arg)
    if unproven is None:
        monitor = cb.finish(summary["outcome"], summary["exit_code"])
    else:
        monitor = cb.keep_custody(summary["outcome"], summary["exit_code"], unproven)
        sys.stderr.write(
            f"harness: campaign custody of run {run.run_id} stays unsettled: {unproven}; "
            f"once they are gone run: harness campaign reconcile {cb.campaign.cli_arg} "
            f"--run {run.run_root}\n")
    if run.manifest is not None:
        from harness.core.models import BudgetRecord

        if run.manifest.extra.budget is None:
            run.manifest.extra.budget = BudgetRecord()
        run.manifest.extra.budget.final = monitor.model_dump(mode="json")


def cleanup_unproven(run_id: str, run_root: str | os.PathLike[str], *,
                     took_over: Sequence[str] = (),
                     ancestors: Sequence[str | os.PathLike[str]] = (),
                     campaign_file: str | None = None) -> str | None:
    """Why the run's cleanup is not proven (a fresh query of every engine the run used
    still lists a container or network labelled with the run, or with a run whose custody
    it took over, or cannot answer); None when none is left, or when no process of the run
    (nor of a run it took over) ever labelled a Docker resource (nothing to prove, no
    Docker needed)."""
    from harness.budget.reconcile import (
        WayOut,
        custody_resources_left,
        leftovers_refusal,
        manifest_facts,
    )
    from harness.sandbox.labels import docker_used

    roots = [run_root, *(ancestors if took_over else ())]
    if not any(docker_used(os.fspath(root)) for root in roots):
        return None
    way_out = WayOut(run_id=run_id, run_root=str(run_root),
                     benchmarks=manifest_facts(run_root).benchmarks,
                     campaign_file=campaign_file)
    try:
        left = custody_resources_left([run_id, *took_over], roots)
        refusal = leftovers_refusal(run_id, left, way_out=way_out)
    except RefusalError as exc:
        return str(exc)
    return None if refusal is None else str(refusal)


@pytest.fixture(autouse=True)
def harness_budget(request: pytest.FixtureRequest) -> Generator[WorkerBudget | None, None, None]:
    """Reserve the instance's expected cost before anything else starts; settle after."""
    state = request.node.stash.get(STATE_KEY, None)
    if state is None or state.ctx.dry_run:
        yield None
        return
    ctx = state.ctx
    settings = settings_from(request.config)
    if not settings.reservations_enabled and settings.min_free_disk_gb is None:
        yield None
        return
    from harness.core.row_details import BudgetDetails

    wb = WorkerBudget(settings, ctx.run_id, ctx.run_root)
    key = ctx.budget_key  # each try of an instance (--retry-infra) reserves on its own
    try:
        wb.reserve(key)
    except CampaignPersistenceError as exc:
        raise InfraError(str(exc), exc.reason_code) from exc
    except BudgetRefused as exc:
        request_stop(ctx.run_root, exc.reason)  # no new instance starts anywhere
        from harness.runner.instance import OutcomeSkip

        raise OutcomeSkip(Outcome.BLOCKED, exc.reason, str(exc)) from exc
    try:
        yield wb
    finally:
        result = ctx.result
        if result.agent_started:
            try:  # the agent's typed cost (AgentOutcome), never the row's details
                settlement = wb.settle(key, result.cost_usd, result.cost_known,
                                       reattached=result.reattached,
                                       earlier_cost_usd=result.earlier_cost_usd)
            except CampaignPersistenceError as exc:
                BudgetDetails(settlement_error=str(exc)).put(result.details)
                request_stop(ctx.run_root, exc.reason_code)
            else:
                if settlement is not None:
                    section = BudgetDetails(overrun=settlement.overran, charged_usd=(
                        settlement.charged_usd + settlement.earlier_charged_usd))
                    if settlement.earlier_charged_usd:
                        section.earlier_attempts_usd = settlement.earlier_charged_usd
                    section.put(result.details)
        else:
            wb.release(key)

