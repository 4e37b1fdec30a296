"""The hijacked connection of one exec: stdin written, Docker's multiplexed stdout and
stderr frames split as they arrive, each stream captured into a bounded head and an
optional tail, until EOF, a deadline or a stop."""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from typing import Any

from harness.sandbox.errors import ExecFailed

_STOP_POLL_S = 0.2


class _Capture:
    """One stream: the first ``head`` bytes and the last ``tail`` bytes, plus the total."""

    def __init__(self, head: int, tail: int) -> None:
        self.head_limit = max(head, 0)
        self.tail_limit = max(tail, 0)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: memoryview) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data and self.tail_limit:
            self.tail += data
            if len(self.tail) > 2 * self.tail_limit:  # trim now and then: amortised O(1)
                del self.tail[: len(self.tail) - self.tail_limit]

    def finish(self) -> tuple[bytes, int | None]:
        if len(self.tail) > self.tail_limit:
            del self.tail[: len(self.tail) - self.tail_limit]
        kept = len(self.head) + len(self.tail)
        cut = len(self.head) if kept < self.total else None
        return bytes(self.head) + bytes(self.tail), cut


class _Demux:
    """Split Docker's multiplexed stream (8-byte header: stream id, size; then the payload)
    as it arrives: a frame's payload is never buffered whole."""

    def __init__(self, head: int, tail: int = 0) -> None:
        self.out = _Capture(head, tail)
        self.err = _Capture(head, tail)
        self._header = bytearray()
        self._remaining = 0
        self._target = self.out

    def feed(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self._remaining == 0:
                need = 8 - len(self._header)
                self._header += view[:need]
                view = view[need:]
                if len(self._header) == 8:
                    self._target = self.err if self._header[0] == 2 else self.out
                    self._remaining = int.from_bytes(self._header[4:8], "big")
                    self._header.clear()
                continue
            chunk = view[: self._remaining]
            self._target.add(chunk)
            self._remaining -= len(chunk)
            view = view[len(chunk) :]


def _raw_socket(sock: Any) -> socket.socket:
    # docker-py's SocketIO hands out no public accessor: major version pinned in pyproject,
    # the reach checked by tests/sandbox/test_docker_private_reaches.py
    raw = getattr(sock, "_sock", sock)
    if not isinstance(raw, socket.socket):
        raise ExecFailed(f"unsupported exec transport {type(raw).__name__}")
    return raw


def _buffered_ahead(sock: Any) -> bytes:
    """Stream bytes the HTTP client already read past the response headers.

    http.client parses the headers through a buffered reader that may pull in the
    start of the hijacked stream when headers and output arrive together (a busy
    client). docker-py then hands out the raw socket and those bytes would be lost.
    Call with the socket non-blocking: an empty buffer then costs no wait.
    """
    try:  # docker-py/urllib3 private attributes: pinned and tested like _raw_socket's
        reader = sock._response.raw._fp.fp
    except AttributeError:
        return b""
    try:
        ahead = reader.peek()
    except (BlockingIOError, OSError, ValueError):
        return b""
    return bytes(reader.read(len(ahead))) if ahead else b""



def _pump(
    raw: socket.socket,
    demux: _Demux,
    stdin: bytes | None,
    deadline: float | None,
    stop: threading.Event | None,
) -> str:
    """Move data until EOF (``"eof"``), the deadline (``"deadline"``) or ``stop``."""
    raw.setblocking(False)
    pending = memoryview(stdin) if stdin is not None else None
    if pending is not None and not pending:
        raw.shutdown(socket.SHUT_WR)  # empty stdin: EOF at once
        pending = None
    while True:
        if stop is not None and stop.is_set():
            return "stop"
        wait = None if deadline is None else deadline - time.monotonic()
        if wait is not None and wait <= 0:
            return "deadline"
        if stop is not None:
            wait = _STOP_POLL_S if wait is None else min(wait, _STOP_POLL_S)
        readable, writable, _ = select.select([raw], [raw] if pending is not None else [], [], wait)
        if writable and pending is not None:
            try:
                sent = raw.send(pending[: 1 << 16])
            except BlockingIOError:
                sent = 0
            except OSError:  # the command exited without reading all of stdin
                sent, pending = 0, memoryview(b"")
            pending = pending[sent:]
            if not pending:
                with contextlib.suppress(OSError):
                    raw.shutdown(socket.SHUT_WR)
                pending = None
        if readable:
            try:
                data = raw.recv(1 << 16)
            except BlockingIOError:
                continue
            except ConnectionResetError:
                data = b""
            if not data:
                return "eof"
            demux.feed(data)
