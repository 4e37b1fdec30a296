"""Where a campaign's state lives, behind one interface, and the rules of opening it.

A campaign is one :class:`CampaignState` document. A :class:`CampaignBackend` keeps it:

* :class:`.filestore.FileCampaignStore`, a JSON file under an fcntl lock (the default);
* :class:`.pgstore.PostgresCampaignStore`, a row of a PostgreSQL table (``--campaign-url``):
  every change is one SERIALIZABLE transaction, queued behind a per-campaign advisory lock,
  so runs on several machines share one ceiling.

Both run the same read-modify-write: :meth:`CampaignBackend.transact` hands the current
state (None when there is no campaign yet) to a change, which returns its result and the
state to save (None: nothing to save), which the backend stores as it is (the shared code
stamps it first: :func:`seal`). Every rule of the campaign (:mod:`.campaign`,
:mod:`.accounting`) is written once, over that interface. Any failure to lock, read or save
is a :class:`CampaignPersistenceError`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, Self, TypeVar

from . import accounting
from . import errors as E
from .errors import refuse
from .models import CampaignState
from .pgurl import CampaignUrl, is_campaign_url

if TYPE_CHECKING:
    from .filestore import FileCampaignStore

T = TypeVar("T")
NO_METER = "none"  # the key fingerprint of a campaign without a meter


def seal(state: CampaignState) -> None:
    """Stamp the state and recompute its derived totals, just before it is saved."""
    state.updated_at_unix = time.time()
    accounting.refresh_derived(state)


class CampaignBackend(Protocol):
    """Storage of one campaign's state (see the module doc)."""

    kind: str  # "file" | "postgresql"
    noun: str  # how messages name it: "campaign file" | "campaign"
    fresh_hint: str  # another campaign, for refusals: "a new campaign file"

    @property
    def location(self) -> str:
        """Shown and recorded: the file's path, or the URL with its password redacted."""
        ...

    @property
    def cli_arg(self) -> str:
        """What a suggested command passes (``env:NAME`` for a URL read from there)."""
        ...

    def read(self) -> CampaignState | None:
        """A consistent snapshot without locking; None when there is no campaign."""
        ...

    def transact(
        self, change: Callable[[CampaignState | None], tuple[T, CampaignState | None]]
    ) -> T:
        """One serialized read-modify-write (see the module doc)."""
        ...


def backend_for(
    where: str | os.PathLike[str] | CampaignUrl | CampaignBackend, *, lock_timeout_sec: float = 30.0
) -> CampaignBackend:
    """The backend of a file path, a ``postgresql://`` URL (or ``env:NAME``), a parsed
    :class:`CampaignUrl`, or a backend (returned as is)."""
    if isinstance(where, CampaignUrl) or (isinstance(where, str) and is_campaign_url(where)):
        from .pgstore import PostgresCampaignStore  # psycopg2 only for a URL

        return PostgresCampaignStore(where, lock_timeout_sec=lock_timeout_sec)
    if isinstance(where, str | os.PathLike):
        from .filestore import FileCampaignStore

        return FileCampaignStore(where, lock_timeout_sec=lock_timeout_sec)
    return where


class CampaignStore:
    """A campaign on its backend: opening (identity checks) and the shared transaction."""

    def __init__(
        self,
        where: str | os.PathLike[str] | CampaignUrl | CampaignBackend,
        *,
        lock_timeout_sec: float = 30.0,
    ) -> None:
        self.backend = backend_for(where, lock_timeout_sec=lock_timeout_sec)

    @property
    def location(self) -> str:
        return self.backend.location

    @property
    def cli_arg(self) -> str:
        return self.backend.cli_arg

    def _file(self) -> FileCampaignStore:
        from .filestore import FileCampaignStore

        if not isinstance(self.backend, FileCampaignStore):
            raise TypeError(f"campaign {self.location} is not a file (use .location)")
        return self.backend

    @property
    def path(self) -> Path:
        """The campaign file (a file campaign only)."""
        return self._file().path

    @property
    def lock_path(self) -> Path:
        return self._file().lock_path

    # ----------------------------------------------------------------- opening

    @classmethod
    def open_or_create(
        cls,
        where: str | os.PathLike[str] | CampaignUrl | CampaignBackend,
        *,
        ceiling_usd: float,
        key_fingerprint: str,
        baseline_usage: float,
        prior_spend_usd: float | None = None,
        lock_timeout_sec: float = 30.0,
    ) -> Self:
        """Create the campaign, or open it and refuse a changed ceiling, key or prior spend.

        ``baseline_usage`` (the key's usage now) is used only at creation (never rebased),
        or when a meter is added to a campaign that had none (``key_fingerprint`` was
        ``"none"``): the meter counts from then on, earlier settled charges in full.
        """
        if not accounting.is_money(ceiling_usd):
            raise ValueError(f"campaign ceiling must be a finite amount >= 0, got {ceiling_usd!r}")
        if not accounting.is_money(baseline_usage):
            raise ValueError(f"usage baseline must be finite and >= 0, got {baseline_usage!r}")
        campaign = cls(where, lock_timeout_sec=lock_timeout_sec)

        def change(state: CampaignState | None) -> tuple[None, CampaignState | None]:
            if state is not None:
                adding = state.key_fingerprint == NO_METER and key_fingerprint != NO_METER
                campaign._check_identity(
                    state, ceiling_usd, NO_METER if adding else key_fingerprint, prior_spend_usd
                )
                if not adding:
                    return None, None
                campaign._add_meter(state, key_fingerprint, baseline_usage)
                seal(state)
                return None, state
            now = time.time()
            created = CampaignState(
                created_at_unix=now,
                updated_at_unix=now,
                ceiling_usd=ceiling_usd,
                key_fingerprint=key_fingerprint,
                usage_baseline=baseline_usage,
                prior_spend_usd=prior_spend_usd or 0.0,
                last_usage=baseline_usage,
                last_reading_at_unix=None,
            )
            seal(created)
            return None, created

        campaign.backend.transact(change)
        return campaign

    @classmethod
    def open(
        cls,
        where: str | os.PathLike[str] | CampaignUrl | CampaignBackend,
        *,
        lock_timeout_sec: float = 30.0,
    ) -> Self:
        """Open an existing campaign (for ``harness campaign show|reconcile``)."""
        campaign = cls(where, lock_timeout_sec=lock_timeout_sec)
        if campaign.backend.read() is None:
            raise refuse(
                E.CAMPAIGN_UNREADABLE, f"{campaign.backend.noun} {campaign.location} does not exist"
            )
        return campaign

    @staticmethod
    def _add_meter(state: CampaignState, key_fingerprint: str, baseline: float) -> None:
        """A meterless campaign gets the meter of this run: from now on the meter counts;
        what was settled before it (the meter cannot see it) stays counted in full."""
        state.key_fingerprint = key_fingerprint
        state.unmetered_usd = state.settled_usd
        state.usage_baseline = state.last_usage = baseline
        state.last_reading_at_unix = None
        state.meter_added_at_unix = time.time()

    def _check_identity(
        self,
        state: CampaignState,
        ceiling_usd: float,
        key_fingerprint: str,
        prior_spend_usd: float | None,
    ) -> None:
        where = f"campaign {self.location}"
        if abs(state.ceiling_usd - ceiling_usd) > accounting.EPS:
            raise refuse(
                E.CAMPAIGN_CEILING_CHANGED,
                f"{where} has ceiling ${state.ceiling_usd:g}; "
                f"--campaign-budget-usd {ceiling_usd:g} differs (a ceiling is fixed at "
                f"creation: pass the same value or start {self.backend.fresh_hint})",
            )
        if state.key_fingerprint != key_fingerprint:
            if key_fingerprint == NO_METER:
                raise refuse(
                    E.CAMPAIGN_KEY_CHANGED,
                    f"{where} is metered (key {state.key_fingerprint}); this "
                    "run has no meter: pass the campaign's --meter (and its key)",
                )
            raise refuse(
                E.CAMPAIGN_KEY_CHANGED,
                f"{where} belongs to key {state.key_fingerprint}; this run's "
                f"key is {key_fingerprint} (use that key or {self.backend.fresh_hint})",
            )
        if prior_spend_usd is not None and abs(state.prior_spend_usd - prior_spend_usd) > 1e-9:
            raise refuse(
                E.CAMPAIGN_PRIOR_SPEND_FIXED,
                f"{where} has prior spend ${state.prior_spend_usd:g}; prior "
                "spend is set only at creation (drop the option)",
            )

    # ------------------------------------------------------------ transactions

    def _mutate(self, change: Callable[[CampaignState], T]) -> T:
        """One transaction: load, apply ``change``, save; the change's result is returned."""

        def apply(state: CampaignState | None) -> tuple[T, CampaignState | None]:
            if state is None:
                raise E.CampaignPersistenceError(
                    f"{self.backend.noun} {self.location} does not exist"
                )
            result = change(state)
            seal(state)
            return result, state

        return self.backend.transact(apply)

    def snapshot(self) -> CampaignState:
        """The current state (a consistent read, without the lock)."""
        state = self.backend.read()
        if state is None:
            raise E.CampaignPersistenceError(f"{self.backend.noun} {self.location} does not exist")
        return state
