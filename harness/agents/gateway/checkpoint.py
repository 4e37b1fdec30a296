"""``task_checkpoint.json``: which agent-server task an instance folder is waiting on.

Written atomically at submit (status ``submitted``) and after every poll, so a run killed
mid-wait (SIGKILL, a lost machine) can reattach to its task on resume.

:class:`AgentFolder` is the one place that names where an instance's agent keeps its
checkpoint and copied events (``gateway_events.jsonl``): the instance folder itself, or the
subfolder the adapter hands the agent as ``AgentRequest.instance_dir`` (Cowork:
``runner_agent/``). The writer (the gateway agent) and every reader (orphan cancel on
resume, the row's paid-activity evidence, reattach) go through it, so an earlier attempt's
files are found in the same subfolder of each ancestor run root.
"""

from __future__ import annotations

import logging
import re
import shutil
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from harness.agents.gateway.models import TaskCheckpoint, TaskResult
from harness.core.fsutil import atomic_write_json, read_json
from harness.core.row_details import AgentDetails

log = logging.getLogger("harness.agents.gateway.client")

CHECKPOINT_NAME = "task_checkpoint.json"
EVENTS_NAME = "gateway_events.jsonl"  # harness.agents.gateway.events writes it

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


@dataclass(frozen=True)
class AgentFolder:
    """Where one instance's agent keeps its checkpoint and events: ``instance_dir/sub``."""

    instance_dir: Path
    sub: PurePosixPath = field(default_factory=lambda: PurePosixPath("."))

    @classmethod
    def of(cls, instance_dir: Path | str, agent_dir: Path | str | None = None) -> AgentFolder:
        """The folder of an agent run in ``agent_dir`` (``AgentRequest.instance_dir``) for
        the instance folder ``instance_dir``; ``agent_dir`` must lie inside it (None: the
        instance folder itself)."""
        base = Path(instance_dir)
        if agent_dir is None:
            return cls(base)
        try:
            rel = Path(agent_dir).resolve().relative_to(base.resolve())
        except ValueError:
            raise ValueError(f"the agent folder {agent_dir} is not inside the instance "
                             f"folder {instance_dir}") from None
        return cls(base, PurePosixPath(rel.as_posix()))

    @property
    def path(self) -> Path:
        return self.instance_dir / self.sub

    @property
    def checkpoint(self) -> Path:
        return self.path / CHECKPOINT_NAME

    @property
    def events(self) -> Path:
        return self.path / EVENTS_NAME

    def in_run(self, run_root: Path | str, benchmark: str, instance_id: str) -> AgentFolder:
        """The same agent folder of this instance in another run root (an ancestor)."""
        return AgentFolder(Path(run_root) / benchmark / instance_id, self.sub)


def carry_checkpoint(folder: AgentFolder, details: dict[str, Any], *, benchmark: str,
                     instance_id: str, ancestors: Iterable[Path | str],
                     source: str | None = None) -> None:
    """On resume, bring the ancestor's checkpoint into ``folder`` (``source`` when given: the
    one of the sandbox adopted for the reattach) so the client can reattach; where it came
    from goes to the row's ``details.agent.checkpoint_from``."""
    target = folder.checkpoint
    if target.exists():
        return
    found = [Path(source)] if source else [
        folder.in_run(root, benchmark, instance_id).checkpoint for root in ancestors]
    for path in found:
        if path.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            AgentDetails(checkpoint_from=str(path)).put(details)
            return
