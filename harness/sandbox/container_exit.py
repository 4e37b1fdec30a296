"""How a container ended: still running, or its exit code, whether a kill or stop reached
the daemon from outside, and whether it ran out of memory (from the daemon's events)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import docker
from docker.errors import APIError, NotFound

from harness.sandbox.errors import ExecFailed


@dataclass(frozen=True)
class ContainerExit:
    """Why a container stopped running, from the daemon's events (None fields: unknown)."""

    running: bool
    exit_code: int | None = None
    killed_via_api: bool = False  # a kill/stop/remove request reached the daemon
    oom: bool = False

    @property
    def from_inside(self) -> bool:
        """It ended from inside (its PID 1 exited or was killed from within, or ran out of
        memory), with no kill, stop or remove request from outside."""
        return not self.running and not self.killed_via_api and (
            self.oom or (self.exit_code is not None and self.exit_code != 0)
        )


# Requests from outside that precede a ``die`` (``destroy`` follows it, also with auto-remove).
_OUTSIDE_ACTIONS = frozenset({"kill", "stop"})


def container_exit(api: docker.APIClient, container_id: str, since: float) -> ContainerExit:
    """Is the container running; if not, how did it end since ``since`` (epoch seconds)?

    A container whose PID 1 exits on its own reports ``die`` (non-zero exit code) with no
    ``kill``; ``docker kill/stop/rm -f`` (the harness, an operator, a sweep) report ``kill``
    or ``stop`` first. A clean exit 0 is the sleep of PID 1 ending (the TTL): not inside.
    Raises :class:`ExecFailed` when Docker cannot answer.
    """
    try:
        info = api.inspect_container(container_id)
        if info.get("State", {}).get("Running"):
            return ContainerExit(running=True)
    except NotFound:
        pass
    except APIError as exc:
        raise ExecFailed(f"inspecting {container_id[:12]} failed: {exc}") from exc
    code: int | None = None
    outside = oom = False
    try:
        events = api.events(
            since=int(since) - 2,
            until=int(time.time()) + 1,
            filters={"container": container_id, "type": "container"},
            decode=True,
        )
        for event in events:
            action = str(event.get("Action") or event.get("status") or "").split(":")[0]
            if action in _OUTSIDE_ACTIONS and code is None:
                outside = True
            elif action == "oom":
                oom = True
            elif action == "die" and code is None:
                raw = (event.get("Actor") or {}).get("Attributes", {}).get("exitCode")
                code = int(raw) if raw is not None and str(raw).isdigit() else None
    except APIError as exc:
        raise ExecFailed(f"reading events of {container_id[:12]} failed: {exc}") from exc
    return ContainerExit(running=False, exit_code=code, killed_via_api=outside, oom=oom)
