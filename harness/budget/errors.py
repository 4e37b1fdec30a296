"""Errors of the budget package and the stable reason codes they carry."""

from __future__ import annotations

from harness.core.errors import HarnessError, InfraError, RefusalError

# Reasons an instance is refused (the runner writes a ``blocked`` row and stops, exit 3)
# or a run is stopped.
CAMPAIGN_BUDGET = "campaign_budget"
RUN_BUDGET = "run_budget"
DISK_RESERVE = "disk_reserve"
BUDGET_METER_UNAVAILABLE = "budget_meter_unavailable"
CAMPAIGN_PERSISTENCE_FAILED = "campaign_persistence_failed"
CAMPAIGN_LEASE_LOST = "campaign_lease_lost"  # this run's lease expired or was taken over

# Refusal reasons at campaign open / admission (RefusalError, exit 2).
CAMPAIGN_CEILING_CHANGED = "campaign_ceiling_changed"
CAMPAIGN_KEY_CHANGED = "campaign_key_changed"
CAMPAIGN_PRIOR_SPEND_FIXED = "campaign_prior_spend_fixed"
CAMPAIGN_STALE_RUN = "campaign_stale_run"
CAMPAIGN_RUN_ID_IN_USE = "campaign_run_id_in_use"
CAMPAIGN_LEASE_LIVE = "campaign_lease_live"  # a live lease holds the custody asked for
CAMPAIGN_UNREADABLE = "campaign_unreadable"
CAMPAIGN_UNMETERED = "campaign_unmetered"  # no meter and no --unknown-cost-allowance-usd
# PostgreSQL campaigns (``--campaign-url``) and ``harness campaign migrate``.
CAMPAIGN_URL_UNUSABLE = "campaign_url_unusable"  # malformed, env var unset, no psycopg2
CAMPAIGN_UNREACHABLE = "campaign_unreachable"  # the database did not answer at admission
CAMPAIGN_MOVED = "campaign_moved"  # the file's campaign was migrated to a URL
CAMPAIGN_EXISTS = "campaign_exists"  # migrate: the URL already holds that campaign
CAMPAIGN_IN_USE = "campaign_in_use"  # migrate: a run still holds custody
CAMPAIGN_STAGE = "campaign"


class BudgetRefused(HarnessError):
    """An instance must not start. ``reason`` is one of the codes above."""

    def __init__(self, reason: str, message: str | None = None) -> None:
        super().__init__(message or reason)
        self.reason = reason


class CampaignPersistenceError(InfraError):
    """The campaign file could not be locked, read or saved: stop the run."""

    reason_code = CAMPAIGN_PERSISTENCE_FAILED


class CampaignStateError(HarnessError):
    """The API was misused (unknown run, a key reserved or settled twice)."""


class MeterError(HarnessError):
    """A usage reading could not be obtained. ``kind``: timeout, http, parse, unavailable."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def refuse(reason: str, message: str) -> RefusalError:
    """A campaign refusal (exit 2): ``reason`` one of the codes above, a one-line message."""
    return RefusalError(message, stage=CAMPAIGN_STAGE, reason=reason, exit_code=2)
