"""The xdist workers of a forked pytest run, forked too (a test helper of :mod:`.forkrun`).

A run's ``-n N`` starts each worker as ``python -u -c "import sys;exec(eval(...))"`` (an
execnet popen gateway): a new interpreter that imports pytest, the plugins and the harness
again, about 0.9 s of CPU per worker here, and the Docker-free tests start some hundred of
them. A forked run (:func:`tests.support.forkrun._child`) therefore forks, before it runs
anything, a *zygote*: a copy of the fork server's warm, clean state, in the run's own
session and process group. Each worker the run's execnet would start is instead forked
from the zygote, and then does what that interpreter would do: its stdin and stdout are the
pipes execnet reads and writes, its stderr the run's stderr of that moment, its working
directory and environment the run's of that moment, the signal handlers a new interpreter
has, and it executes execnet's bootstrap line as ``-c`` would. Signals to the run's process
group reach the workers as they would reach real ones (a SIGKILL of the group kills them,
Ctrl-C interrupts them), the run kills a worker by its pid, and execnet waits for its exit
status as it waits for a child's.

Only a plain popen gateway (``python -u [-B] -c <bootstrap>`` with this interpreter) is
forked; any other command runs as before. Protocol on a ``SOCK_SEQPACKET`` socket pair:
the run sends ``{"id", "cwd", "env", "unbuffered", "no_bytecode"}`` with three descriptors
(the worker's stdin, stdout and stderr); the zygote answers ``{"id", "pid"}`` when the
worker has started and ``{"id", "rc"}`` when it has ended (negative for a signal).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import signal
import socket
import sys
import threading
import time
import types
from typing import Any

from tests.support.forked import Child, Pending, Status, reap

REAP_SEC = 0.01  # how often a zygote with running workers looks for ended ones
MAX_MESSAGE = 1 << 20  # a request: the environment is the largest part


def _catchable() -> list[signal.Signals]:
    return [s for s in signal.valid_signals() if isinstance(s, signal.Signals)
            and s not in (signal.SIGKILL, signal.SIGSTOP)]  # fmt: skip


class _Popen(Child):
    """The part of ``subprocess.Popen`` execnet uses (``wait``, ``kill``), plus what
    ``Popen2IO`` reads and writes (``stdin``, ``stdout``)."""

    def __init__(
        self, pid: int, stdin: Any, stdout: Any, ended: threading.Event, status: Status
    ) -> None:
        super().__init__(pid, ended, status)
        self.stdin = stdin
        self.stdout = stdout


class ZygoteClient:
    """The run's side: asks the zygote for a worker, hands it the pipes, learns its end."""

    def __init__(self, sock: socket.socket, pid: int) -> None:
        self.sock = sock
        self.pid = pid
        self._lock = threading.Lock()
        self._pending = Pending()
        self._next = 0
        self._reader: threading.Thread | None = None

    def handles(self, args: list[str]) -> tuple[bool, bool] | None:
        """(unbuffered, no_bytecode) when ``args`` is execnet's plain popen command."""
        from execnet.gateway_io import popen_bootstrapline

        if not args or args[0] != sys.executable or args[-2:] != ["-c", popen_bootstrapline]:
            return None
        flags = args[1:-2]
        if flags not in (["-u"], ["-u", "-B"]):
            return None
        return True, "-B" in flags

    def spawn(self, unbuffered: bool, no_bytecode: bool) -> _Popen:
        """A worker with pipes for its stdin and stdout (as ``Popen(stdin=PIPE,
        stdout=PIPE)`` makes them) and this process's stderr."""
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        try:
            with self._lock:
                self._next += 1
                req_id = str(self._next)
                started, ended, status = self._pending.add(req_id)
                if self._reader is None:
                    self._reader = threading.Thread(target=self._read, daemon=True,
                                                    name="zygote-reader")  # fmt: skip
                    self._reader.start()
                msg = json.dumps(
                    {
                        "id": req_id,
                        "cwd": os.getcwd(),
                        "env": dict(os.environ),
                        "unbuffered": unbuffered,
                        "no_bytecode": no_bytecode,
                    }
                )
                socket.send_fds(self.sock, [msg.encode()], [in_r, out_w, 2])
        finally:
            os.close(in_r)
            os.close(out_w)
        if not started.wait(60) or "pid" not in status:
            os.close(in_w)
            os.close(out_r)
            raise OSError("the zygote did not start the xdist worker")
        # what subprocess.Popen gives with stdin=PIPE, stdout=PIPE (bufsize -1)
        return _Popen(status["pid"], open(in_w, "wb"), open(out_r, "rb"), ended, status)

    def close(self, timeout: float = 5.0) -> None:
        """End the zygote (it goes when the socket closes) and reap it, so that its CPU
        time, and its workers', is this process's children's (as a real run's workers'
        is). Never raises: the run's own exit status is what counts."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the reader; the zygote reads EOF
        with contextlib.suppress(OSError):
            self.sock.close()
        deadline = time.monotonic() + timeout
        while True:
            try:
                pid, _ = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return
            if pid or time.monotonic() > deadline:
                return
            time.sleep(0.005)

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(MAX_MESSAGE)
            except OSError:
                data = b""
            if not data:
                break
            self._pending.answer(json.loads(data))
        self._pending.abandon()  # the zygote is gone: no worker of it is ever answered again


def start() -> ZygoteClient:
    """Fork the zygote of this (forked, not yet running) pytest process, and make execnet's
    popen gateways ask it for their workers."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    handlers = {s: signal.getsignal(s) for s in _catchable()}
    pid = os.fork()
    if pid == 0:
        ours.close()
        _serve(theirs, handlers)  # never returns
    theirs.close()
    client = ZygoteClient(ours, pid)
    _patch_execnet(client)
    return client


def _patch_execnet(client: ZygoteClient) -> None:
    from execnet import gateway_io

    original = gateway_io.Popen2IOMaster.__init__

    def __init__(self: Any, args: list[str], execmodel: Any) -> None:
        plain = client.handles(args)
        if plain is None:
            original(self, args, execmodel)
            return
        self.popen = p = client.spawn(*plain)
        gateway_io.Popen2IO.__init__(self, p.stdin, p.stdout, execmodel=execmodel)

    gateway_io.Popen2IOMaster.__init__ = __init__  # type: ignore[method-assign]


def _say(sock: socket.socket, answer: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # the run is gone: nobody to tell
        sock.send(json.dumps(answer).encode())


def _serve(sock: socket.socket, handlers: dict[signal.Signals, Any]) -> None:
    """The zygote: fork a worker per request, report its end; stop when the run has gone."""
    rc = 0
    try:
        # The run's signals are the run's: Ctrl-C or SIGTERM to its process group must not
        # end the zygote before the run itself (it goes when the run's end closes the socket).
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1,
                    signal.SIGUSR2, signal.SIGQUIT):  # fmt: skip
            signal.signal(sig, signal.SIG_IGN)
        children: dict[int, str] = {}
        while True:
            ready, _, _ = select.select([sock], [], [], REAP_SEC if children else None)
            if ready:
                msg, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, 3)
                if not msg:
                    break
                req = json.loads(msg)
                pid = os.fork()
                if pid == 0:
                    sock.close()
                    _worker(req, fds, handlers)
                for fd in fds:
                    os.close(fd)
                children[pid] = req["id"]
                _say(sock, {"id": req["id"], "pid": pid})
            reap(children, lambda answer: _say(sock, answer))
    except BaseException:  # the zygote never raises into the forked run's code
        rc = 70
    finally:
        os._exit(rc)


def _worker(req: dict[str, Any], fds: list[int], handlers: dict[signal.Signals, Any]) -> None:
    """Become ``python -u [-B] -c <execnet bootstrap>`` with the run's cwd and environment."""
    rc = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        for sig, handler in handlers.items():
            with contextlib.suppress(OSError, ValueError, TypeError):
                signal.signal(sig, handler)
        sys.dont_write_bytecode = bool(req["no_bytecode"])
        # New standard streams over descriptors 0-2, as a new interpreter makes them (with
        # -u: the binary layer of stdout and stderr unbuffered, the text layer write-through).
        enc, err = sys.__stdout__.encoding, sys.__stdout__.errors  # type: ignore[union-attr]
        sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                                     encoding=enc, errors=err)  # fmt: skip
        for fd, name, errors in ((1, "stdout", err), (2, "stderr", "backslashreplace")):
            raw = io.FileIO(fd, "w", closefd=False)
            stream = io.TextIOWrapper(raw, encoding=enc, errors=errors, write_through=True) \
                if req["unbuffered"] else io.TextIOWrapper(io.BufferedWriter(raw),
                                                           encoding=enc, errors=errors,
                                                           line_buffering=fd == 2)  # fmt: skip
            setattr(sys, name, stream)
            setattr(sys, f"__{name}__", stream)
        setattr(sys, "__stdin__", sys.stdin)  # noqa: B010 (a final name for mypy)
        sys.argv = ["-c"]
        sys.path[0] = ""  # what ``-c`` puts first (the working directory)
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        try:
            exec("import sys;exec(eval(sys.stdin.readline()))", main.__dict__)
            rc = 0
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        threading._shutdown()  # type: ignore[attr-defined]  # as an interpreter's exit does
    except BaseException:  # anything else is a failed worker, reported as Python would
        import traceback

        traceback.print_exc()
        rc = 1
    finally:
        try:
            for std in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    std.flush()
        finally:
            os._exit(rc)
