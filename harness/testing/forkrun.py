"""Whole pytest runs in fresh processes without paying the interpreter's start-up each time.

A test helper. Tests of the runner start many short pytest sessions (``Suite.run``,
``run_pytest``); most of each one used to go to starting Python and importing pytest,
pydantic, docker-py and the harness (about 0.8 s of a 1.1 s run here). A fork server is
started once per test process: it imports those modules and then waits. Each run is a
``fork()`` of it, so every session is still a separate process with its own pid, session,
working directory, environment, standard streams, signal handlers and exit status, as
``python -m pytest`` would give, only with the imports already done. Nothing of one run
survives into the next: the server itself never runs pytest.

Protocol: one JSON request per line on the server's stdin (``argv``, ``cwd``, ``env``,
``out``: the file that receives the run's stdout and stderr); the server answers with one
line ``{"pid": N}`` when the run has started and one ``{"rc": N}`` when it has ended. A
caller that gives up kills the run's process group; the server still answers ``rc``.

Runs that a test signals or watches while they run (``Suite.start``) keep using
``subprocess.Popen``: the fork server's children are not the test's children.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

# Imported by the server before it forks (third-party code and the harness's heavy modules).
PRELOAD = (
    "pytest", "_pytest.config", "_pytest.main", "_pytest.terminal", "_pytest.python",
    "_pytest.fixtures", "_pytest.assertion.rewrite", "_pytest.junitxml", "xdist.plugin",
    "xdist.dsession", "execnet", "pydantic", "docker", "requests", "jinja2", "rich.console",
    "harness.plugin", "harness.controller", "harness.ledger", "harness.models",
    "harness.testing.plugin", "harness.sandbox.cleanup",
)  # fmt: skip
# pytest warns when a module of an entry-point plugin's distribution was imported before it
# could rewrite its asserts; here that is by design (the modules are the same files).
ARGS = ("-W", "ignore::pytest.PytestAssertRewriteWarning")


def _child(req: dict[str, Any]) -> None:
    """Become ``python -m pytest ARGV`` in CWD with ENV; never returns."""
    rc = 70
    try:
        os.setsid()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        out = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        os.close(null)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        sys.path[0] = os.getcwd()  # what ``python -m`` puts first
        sys.argv = ["pytest", *ARGS, *req["argv"]]
        try:
            runpy.run_module("pytest", run_name="__main__", alter_sys=True)  # python -m pytest
            rc = 0
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # anything else is a failed run, reported as Python would
        import traceback

        traceback.print_exc()
        rc = 70
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(rc)


def serve() -> None:
    """The server's loop: preload, then fork one child per request, one at a time."""
    import importlib

    for name in PRELOAD:
        with contextlib.suppress(ImportError):  # not installed: a run that needs it fails
            importlib.import_module(name)
    from harness import registry

    registry.report_plugin()  # the report and the benchmarks, as registered (entry points)
    registry.benchmarks()
    gc.freeze()  # what is loaded now is never collected: each run's gc passes skip it
    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(req)
        sys.stdout.write(json.dumps({"pid": pid}) + "\n")
        sys.stdout.flush()
        _, status = os.waitpid(pid, 0)
        sys.stdout.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n")
        sys.stdout.flush()


@dataclass
class Finished:
    returncode: int
    output: str


class ForkServer:
    """The client: one server process, started on first use, reused by later runs."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def _server(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            env = {k: v for k, v in os.environ.items()
                   if k not in ("PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS")}
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "harness.testing.forkrun"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, text=True, env=env, cwd=Path(__file__).parents[2],
            )  # fmt: skip
        return self._proc

    @staticmethod
    def _answer(stream: IO[str], deadline: float | None) -> dict[str, Any] | None:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([stream], [], [], wait)
        if not ready:
            return None
        line = stream.readline()
        if not line:
            raise RuntimeError("the fork server ended unexpectedly")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def run(self, argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> Finished:
        """Run ``python -m pytest ARGV`` (ARGV without ``-m pytest``); on timeout kill it
        and raise ``subprocess.TimeoutExpired``."""
        fd, name = tempfile.mkstemp(prefix="harness-forkrun-", suffix=".out")
        os.close(fd)
        out = Path(name)
        try:
            return self._run(argv, cwd, env, timeout, out)
        finally:
            out.unlink(missing_ok=True)

    def _run(self, argv: list[str], cwd: Path, env: dict[str, str], timeout: float,
             out: Path) -> Finished:
        with self._lock:
            proc = self._server()
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps({"argv": argv, "cwd": str(cwd),
                                         "env": env, "out": str(out)}) + "\n")
            proc.stdin.flush()
            started = self._answer(proc.stdout, None)
            assert started is not None
            ended = self._answer(proc.stdout, time.monotonic() + timeout)
            if ended is None:
                os.killpg(started["pid"], signal.SIGKILL)
                self._answer(proc.stdout, None)
                raise subprocess.TimeoutExpired(argv, timeout, out.read_text(errors="replace"))
            return Finished(int(ended["rc"]), out.read_text(errors="replace"))

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None


if __name__ == "__main__":
    serve()
