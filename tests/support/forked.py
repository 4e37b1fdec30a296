"""What :mod:`.forkrun` and :mod:`.zygote` share (a test helper): a server that forks a child
per request and reports ``{"id", "pid"}`` when it started and ``{"id", "rc"}`` when it ended,
and its client, which waits for those answers and gives a ``Popen``-like handle.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from typing import Any

Status = dict[str, int]  # {"pid": N, "rc": N} as they become known


class Pending:
    """The client's requests not yet answered (shared by the sender and the reader)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, tuple[threading.Event, threading.Event, Status]] = {}

    def add(self, req_id: str) -> tuple[threading.Event, threading.Event, Status]:
        """Events set when the child has started and ended, and its status."""
        status: Status = {}
        entry = (threading.Event(), threading.Event(), status)
        with self._lock:
            self._waiting[req_id] = entry
        return entry

    def answer(self, answer: dict[str, Any]) -> None:
        """One answer of the server: the child's pid, or its exit status."""
        with self._lock:
            started, ended, status = self._waiting[answer["id"]]
            if "pid" in answer:
                status["pid"] = answer["pid"]
                started.set()
            else:
                status["rc"] = answer["rc"]
                del self._waiting[answer["id"]]
                ended.set()

    def abandon(self) -> None:
        """The server is gone: nothing pending is ever answered (each reads as killed)."""
        with self._lock:
            for started, ended, status in self._waiting.values():
                status.setdefault("rc", -int(signal.SIGKILL))
                started.set()
                ended.set()
            self._waiting.clear()


class Child:
    """A child of a fork server, seen from its client: the part of ``subprocess.Popen``
    about its end (``pid``, ``returncode``, ``poll``, ``wait``, signals)."""

    def __init__(self, pid: int, ended: threading.Event, status: Status) -> None:
        self.pid = pid
        self._ended = ended
        self._status = status

    @property
    def returncode(self) -> int | None:
        return self._status.get("rc")

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
        return self._status["rc"]

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def reap(children: dict[int, str], say: Callable[[dict[str, Any]], None]) -> None:
    """The server's side: report every child that has ended (``children``: pid -> id)."""
    while children:
        pid, wstatus = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        say({"id": children.pop(pid), "rc": os.waitstatus_to_exitcode(wstatus)})
