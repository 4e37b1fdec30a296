"""The campaign in a JSON file: fcntl lock, load, atomic save.

Every read-modify-write holds ``<file>.lock`` (``filelock.UnixFileLock``, fcntl based,
no soft fallback) and saves atomically (temp file, fsync, rename, fsync of the folder).
Any failure to lock, read or save is a :class:`CampaignPersistenceError`. A file whose
campaign ``harness campaign migrate`` moved to PostgreSQL holds a :class:`CampaignMoved`
record instead: every use of it is refused, naming the URL.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import filelock
from pydantic import ValidationError

from harness.core.fsutil import atomic_write_json

from . import errors as E
from .errors import refuse
from .models import MOVED_SCHEMA, CampaignMoved, CampaignState

T = TypeVar("T")


class FileCampaignStore:
    """Handle on a campaign file; cheap, holds no open file, safe to share across threads."""

    kind = "file"
    noun = "campaign file"
    fresh_hint = "a new campaign file"

    def __init__(self, path: str | os.PathLike[str], *, lock_timeout_sec: float = 30.0) -> None:
        self.path = Path(path).absolute()
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.lock_timeout_sec = lock_timeout_sec

    @property
    def location(self) -> str:
        return str(self.path)

    @property
    def cli_arg(self) -> str:
        return str(self.path)

    def read(self) -> CampaignState | None:
        """The current state, None when the file does not exist (atomic renames make a
        lock-free read consistent)."""
        return self._load()

    def transact(
        self, change: Callable[[CampaignState | None], tuple[T, CampaignState | None]]
    ) -> T:
        """Lock, load (None: no file yet), apply ``change``, save the state it returns (if
        any, as it is: :func:`.store.seal` stamped it); the change's result is returned."""
        with self._locked():
            state = self._load()
            result, new = change(state)
            if new is not None:
                self._save(new)
            return result

    def move_out(self, install: Callable[[CampaignState], str]) -> CampaignState:
        """Under the lock: hand the state to ``install`` (it stores it elsewhere and returns
        where), then leave a :class:`CampaignMoved` record naming that place in the file."""
        with self._locked():
            state = self._load()
            if state is None:
                raise refuse(E.CAMPAIGN_UNREADABLE, f"campaign file {self.path} does not exist")
            moved_to = install(state)
            record = CampaignMoved(moved_to=moved_to, moved_at_unix=time.time(), campaign=state)
            try:
                atomic_write_json(self.path, record)
            except OSError as exc:
                raise E.CampaignPersistenceError(
                    f"campaign copied to {moved_to}, but {self.path} could not be marked "
                    f"moved ({exc}): remove {self.path} before any run uses it"
                ) from exc
            return state

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

    def _load(self) -> CampaignState | None:
        """The state; None when there is no file (only then: a path through a file, or an
        unreadable one, is a persistence error)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise E.CampaignPersistenceError(f"could not read {self.path}: {exc}") from exc
        try:
            data = json.loads(text)
            if isinstance(data, dict) and data.get("schema") == MOVED_SCHEMA:
                moved = CampaignMoved.model_validate(data)
                raise refuse(
                    E.CAMPAIGN_MOVED,
                    f"campaign file {self.path} was moved to {moved.moved_to} by harness "
                    f"campaign migrate: pass --campaign-url {moved.moved_to} instead",
                )
            return CampaignState.model_validate(data)
        except (ValueError, ValidationError) as exc:
            raise E.CampaignPersistenceError(f"{self.path} is not a campaign file: {exc}") from exc

    def _save(self, state: CampaignState) -> None:
        try:
            atomic_write_json(self.path, state)
        except OSError as exc:
            raise E.CampaignPersistenceError(f"could not save {self.path}: {exc}") from exc
