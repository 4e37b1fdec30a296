"""Storage of the campaign file: fcntl lock, load, atomic save, identity checks.

Every read-modify-write holds ``<file>.lock`` (``filelock.UnixFileLock``, fcntl based,
no soft fallback) and saves atomically (temp file, fsync, rename, fsync of the folder).
Any failure to lock, read or save is a :class:`CampaignPersistenceError`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Self, TypeVar

import filelock
from pydantic import ValidationError

from harness.core.errors import RefusalError
from harness.core.fsutil import atomic_write_json

from . import accounting
from . import errors as E
from .models import CampaignState

T = TypeVar("T")
NO_METER = "none"  # the key fingerprint of a campaign without a meter


def refuse(reason: str, message: str) -> RefusalError:
    return RefusalError(message, stage=E.CAMPAIGN_STAGE, reason=reason, exit_code=2)


class CampaignStore:
    """Handle on a campaign file; cheap, holds no open file, safe to share across threads."""

    def __init__(self, path: str | os.PathLike[str], *, lock_timeout_sec: float = 30.0) -> None:
        self.path = Path(path).absolute()
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.lock_timeout_sec = lock_timeout_sec

    # ----------------------------------------------------------------- opening

    @classmethod
    def open_or_create(
        cls,
        path: str | os.PathLike[str],
        *,
        ceiling_usd: float,
        key_fingerprint: str,
        baseline_usage: float,
        prior_spend_usd: float | None = None,
        lock_timeout_sec: float = 30.0,
    ) -> Self:
        """Create the file, or open it and refuse a changed ceiling, key or prior spend.

        ``baseline_usage`` (the key's usage now) is used only at creation (never rebased),
        or when a meter is added to a campaign that had none (``key_fingerprint`` was
        ``"none"``): the meter counts from then on, earlier settled charges in full.
        """
        if not accounting.is_money(ceiling_usd):
            raise ValueError(f"campaign ceiling must be a finite amount >= 0, got {ceiling_usd!r}")
        if not accounting.is_money(baseline_usage):
            raise ValueError(f"usage baseline must be finite and >= 0, got {baseline_usage!r}")
        campaign = cls(path, lock_timeout_sec=lock_timeout_sec)
        with campaign._locked():
            if campaign.path.exists():
                state = campaign._load()
                adding = state.key_fingerprint == NO_METER and key_fingerprint != NO_METER
                campaign._check_identity(state, ceiling_usd,
                                         NO_METER if adding else key_fingerprint,
                                         prior_spend_usd)
                if adding:
                    campaign._add_meter(state, key_fingerprint, baseline_usage)
                return campaign
            now = time.time()
            state = CampaignState(
                created_at_unix=now,
                updated_at_unix=now,
                ceiling_usd=ceiling_usd,
                key_fingerprint=key_fingerprint,
                usage_baseline=baseline_usage,
                prior_spend_usd=prior_spend_usd or 0.0,
                last_usage=baseline_usage,
                last_reading_at_unix=None,
            )
            campaign._save(state)
        return campaign

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, lock_timeout_sec: float = 30.0) -> Self:
        """Open an existing file (for ``harness campaign show|reconcile``)."""
        campaign = cls(path, lock_timeout_sec=lock_timeout_sec)
        if not campaign.path.exists():
            raise refuse(E.CAMPAIGN_UNREADABLE, f"campaign file {campaign.path} does not exist")
        campaign.snapshot()
        return campaign

    def _add_meter(self, state: CampaignState, key_fingerprint: str, baseline: float) -> None:
        """A meterless campaign gets the meter of this run: from now on the meter counts;
        what was settled before it (the meter cannot see it) stays counted in full."""
        state.key_fingerprint = key_fingerprint
        state.unmetered_usd = state.settled_usd
        state.usage_baseline = state.last_usage = baseline
        state.last_reading_at_unix = None
        state.meter_added_at_unix = time.time()
        self._save(state)

    def _check_identity(
        self,
        state: CampaignState,
        ceiling_usd: float,
        key_fingerprint: str,
        prior_spend_usd: float | None,
    ) -> None:
        if abs(state.ceiling_usd - ceiling_usd) > accounting.EPS:
            raise refuse(
                E.CAMPAIGN_CEILING_CHANGED,
                f"campaign {self.path} has ceiling ${state.ceiling_usd:g}; "
                f"--campaign-budget-usd {ceiling_usd:g} differs (a ceiling is fixed at "
                "creation: pass the same value or start a new campaign file)",
            )
        if state.key_fingerprint != key_fingerprint:
            if key_fingerprint == NO_METER:
                raise refuse(
                    E.CAMPAIGN_KEY_CHANGED,
                    f"campaign {self.path} is metered (key {state.key_fingerprint}); this "
                    "run has no meter: pass the campaign's --meter (and its key)",
                )
            raise refuse(
                E.CAMPAIGN_KEY_CHANGED,
                f"campaign {self.path} belongs to key {state.key_fingerprint}; this run's "
                f"key is {key_fingerprint} (use that key or a new campaign file)",
            )
        if prior_spend_usd is not None and abs(state.prior_spend_usd - prior_spend_usd) > 1e-9:
            raise refuse(
                E.CAMPAIGN_PRIOR_SPEND_FIXED,
                f"campaign {self.path} has prior spend ${state.prior_spend_usd:g}; prior "
                "spend is set only at creation (drop the option)",
            )

    # ------------------------------------------------------------ transactions

    @contextmanager
    def _locked(self) -> Iterator[None]:
        lock = filelock.UnixFileLock(
            str(self.lock_path), timeout=self.lock_timeout_sec, fallback_to_soft=False
        )
        try:
            lock.acquire()
        except filelock.Timeout as exc:
            raise E.CampaignPersistenceError(
                f"could not lock {self.lock_path} within {self.lock_timeout_sec:g}s"
            ) from exc
        except OSError as exc:
            raise E.CampaignPersistenceError(f"could not lock {self.lock_path}: {exc}") from exc
        try:
            yield
        finally:
            lock.release()

    def _load(self) -> CampaignState:
        try:
            text = self.path.read_text(encoding="utf-8")
        except OSError as exc:
            raise E.CampaignPersistenceError(f"could not read {self.path}: {exc}") from exc
        try:
            return CampaignState.model_validate(json.loads(text))
        except (ValueError, ValidationError) as exc:
            raise E.CampaignPersistenceError(f"{self.path} is not a campaign file: {exc}") from exc

    def _save(self, state: CampaignState) -> None:
        state.updated_at_unix = time.time()
        accounting.refresh_derived(state)
        try:
            atomic_write_json(self.path, state)
        except OSError as exc:
            raise E.CampaignPersistenceError(f"could not save {self.path}: {exc}") from exc

    def _mutate(self, change: Callable[[CampaignState], T]) -> T:
        """Lock, load, apply ``change``, save; the change's result is returned."""
        with self._locked():
            state = self._load()
            result = change(state)
            self._save(state)
            return result

    def snapshot(self) -> CampaignState:
        """The current state (atomic renames make a lock-free read consistent)."""
        return self._load()
