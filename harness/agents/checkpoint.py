"""``task_checkpoint.json``: which agent-server task an instance folder is waiting on.

Written atomically at submit (status ``submitted``) and after every poll, so a run killed
mid-wait (SIGKILL, a lost machine) can reattach to its task on resume.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from pathlib import Path
from typing import Any

from harness.agents.gateway_models import TaskCheckpoint, TaskResult
from harness.fsutil import atomic_write_json, read_json

log = logging.getLogger("harness.agents.gateway")

CHECKPOINT_NAME = "task_checkpoint.json"

_ID_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def new_task_id(prefix: str) -> str:
    """A fresh client-chosen task id (makes a retried submit idempotent)."""
    clean = _ID_UNSAFE.sub("-", prefix).strip("-.")[:48] or "task"
    return f"{clean}-{uuid.uuid4().hex[:16]}"


def write_checkpoint(
    path: Path,
    task_id: str,
    status: str,
    result: TaskResult | None,
    base_url: str | None,
    polls: int,
    events: dict[str, Any] | None = None,
) -> None:
    checkpoint = TaskCheckpoint(
        task_id=task_id,
        ts_unix=time.time(),
        status=status,
        base_url=base_url,
        polls=polls,
        task_result=result.model_dump(mode="json") if result is not None else None,
        events=events,
    )
    atomic_write_json(path, checkpoint)


def read_checkpoint(path: Path) -> TaskCheckpoint | None:
    """The checkpoint, or None when absent or unreadable (a torn file means fresh)."""
    try:
        return TaskCheckpoint.model_validate(read_json(path))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable checkpoint %s (%s)", path, exc)
        return None
