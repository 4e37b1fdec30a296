"""Whole pytest runs in fresh processes without paying the interpreter's start-up each time.

A test helper. Tests of the runner start many short pytest sessions (``Suite.run``,
``run_pytest``); most of each one used to go to starting Python and importing pytest,
pydantic, docker-py and the harness (about 0.8 s of a 1.1 s run here). A fork server is
started once per test process: it imports those modules and then waits. Each run is a
``fork()`` of it, so every session is still a separate process with its own pid, session,
working directory, environment, standard streams, signal handlers and exit status, as
``python -m pytest`` would give, only with the imports already done. Nothing of one run
survives into the next: the server itself never runs pytest.

Protocol: one JSON request per line on the server's stdin (``id``, ``module``: what
``python -m`` would run, ``argv``, ``cwd``, ``env``, ``out``: the file that receives the
child's stdout, and its stderr unless ``err`` names another file); the server answers
``{"id", "pid"}`` when the child has started and ``{"id", "rc"}`` when it has ended (its
exit status as ``subprocess`` gives it: negative for a signal). Children run concurrently; each leads its own session, so a
caller signals it, or its whole process group, by pid.

:meth:`ForkServer.spawn` gives a :class:`ForkedProcess`, which answers the parts of
``subprocess.Popen`` the tests use (``pid``, ``poll``, ``wait``, ``communicate``,
``send_signal``, ``kill``, ``returncode``); :meth:`ForkServer.run` runs to the end.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support import dist_cache
from tests.support.forked import Child, Pending, Status, reap

# Imported by the server before it forks (third-party code and the harness's heavy modules).
# Not xdist: ``xdist.plugin`` freezes ``sys.path`` when imported, "at interpreter start-up",
# and hands it to the workers; each run imports it after setting up its own path.
PRELOAD = (
    "pytest", "_pytest.config", "_pytest.main", "_pytest.terminal", "_pytest.python",
    "_pytest.fixtures", "_pytest.assertion.rewrite", "_pytest.junitxml", "execnet", "pydantic",
    "docker", "requests", "jinja2", "rich.console",
    "harness.runner.plugin", "harness.runner.controller", "harness.run.ledger", "harness.core.models",
    "harness.testing.plugin", "harness.sandbox.cleanup", "harness.runner.agent_plugin",
    "harness.runner.budget_plugin", "harness.runner.sandbox_fixtures", "harness.runner.sandbox_hooks",
    "harness.runner.engine_plugin", "harness.runner.engine_admission",
    "harness.runner.pull_plugin", "harness.runner.order",
    "harness.runner.summary", "harness.core.activity", "harness.agents.base", "harness.agents.provenance",
    "harness.budget.accounting", "harness.budget.campaign", "harness.budget.custody",
    "harness.budget.disk", "harness.budget.models", "harness.budget.monitor",
    "harness.budget.store", "harness.budget.supervisor", "harness.sandbox.engines",
    "harness.sandbox.placement", "harness.sandbox.runtimes", "pytest_timeout", "platformdirs",
    "platformdirs.pytest_plugin", "pdb", "unittest", "tomllib", "concurrent.futures", "netrc",
    "faulthandler", "readline",
)  # fmt: skip
# What the runs import after their start-up (measured: the modules that at least 10 of the
# Docker-free loop's forked runs imported, about 18 ms of CPU a run for the model tape alone):
# the selftest runs' model tape, and the benchmark runs' adapters, scorer and gateway client.
# None reads the environment when imported. Not their conftests nor their test modules:
# pytest imports those itself, from the run's own rootdir.
PRELOAD_RUNS = (
    "httpx", "yaml", "pytest_benchmark.plugin",
    "harness.model_proxy.tape", "harness.model_proxy.pinning", "harness.run.secrets",
    "harness.core.untrusted", "harness.budget.filestore", "harness.budget.pgstore",
    "harness.budget.reconcile", "harness.sandbox.container", "harness.sandbox.execution",
    "harness.sandbox.network", "harness.sandbox.pack", "harness.sandbox.protected",
    "harness.sandbox.reattach", "harness.sandbox.static_tools", "harness.sandbox.transfer",
    "harness.sandbox.images.build", "harness.sandbox.images.builders",
    "harness.sandbox.images.recipes", "harness.sandbox.images.transfer",
    "harness.agents.gateway.checkpoint", "harness.agents.gateway.events",
    "harness.agents.gateway.http", "harness.agents.gateway.reattach",
    "harness.agents.reference_server.config", "harness.agents.reference_server.execution",
    "harness.agents.reference_server.mcp_client", "harness.agents.reference_server.tasks",
    "benchmarks.programbench.runner", "benchmarks.programbench.official_eval",
    "benchmarks.programbench.parity", "benchmarks.programbench.rescore",
    "benchmarks.programbench.session", "benchmarks.programbench.submission",
    "benchmarks.programbench.agent_probe", "benchmarks.programbench.docker_policy_record",
    "benchmarks.programbench.task_body", "benchmarks.programbench.workspace",
    "benchmarks.cowork_bench.instance", "benchmarks.cowork_bench.phases",
    "benchmarks.cowork_bench.eval_once", "benchmarks.cowork_bench.diagnostic",
    "benchmarks.cowork_bench.run_images", "benchmarks.cowork_bench.resume_check",
    "benchmarks.cowork_bench.task_body", "benchmarks.cowork_bench.agents",
)  # fmt: skip
# pytest warns when a module of an entry-point plugin's distribution was imported before it
# could rewrite its asserts; here that is by design (the modules are the same files).
ARGS = ("-W", "ignore::pytest.PytestAssertRewriteWarning")
REAP_SEC = 0.01  # how often a server with running children looks for ended ones


def _child(req: dict[str, Any]) -> None:
    """Become ``python -m MODULE ARGV`` in CWD with ENV; never returns."""
    rc = 70
    zygote_client = None
    try:
        os.setsid()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        out = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        err = os.open(req["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) \
            if req.get("err") else out
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        for fd in {out, err, null}:
            os.close(fd)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        sys.path[0] = os.getcwd()  # what ``python -m`` puts first
        # ... then $PYTHONPATH, which a fresh interpreter reads at start-up (e.g. a test's
        # ``-p plugin`` module): the server's own start-up did not see the run's.
        extra = [p for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[1:1] = [p for p in extra if p not in sys.path]
        module = req["module"]
        sys.argv = [module, *(ARGS if module == "pytest" else ()), *req["argv"]]
        if module == "pytest":  # its xdist workers, if any, are forks too (see .zygote)
            from tests.support import zygote

            zygote_client = zygote.start()
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
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
            if zygote_client is not None:
                zygote_client.close()  # reaped here: its workers' CPU counts to this process
            os._exit(rc)


def _say(answer: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


def serve(extra: tuple[str, ...] = ()) -> None:
    """The server's loop: preload (:data:`PRELOAD`, then ``extra``), then fork a child per
    request and report its end."""
    import importlib

    from _pytest.config import default_plugins

    with contextlib.redirect_stdout(sys.stderr):  # stdout is the protocol's
        for name in (*PRELOAD, *(f"_pytest.{p}" for p in default_plugins), *PRELOAD_RUNS,
                     *extra):
            with contextlib.suppress(ImportError):  # not installed: a run that needs it fails
                importlib.import_module(name)
    from harness.core import registry

    report = registry.report_plugin()  # the report and the benchmarks, as registered
    preload = getattr(report, "preload", None)
    if preload is not None:
        preload()  # its templates compiled once here, not in every run
    registry.benchmarks()
    importlib.import_module("tests.support.zygote")  # each pytest run's workers: .zygote
    dist_cache.read_once()  # the installed distributions, listed once for every run
    gc.freeze()  # what is loaded now is never collected: each run's gc passes skip it
    children: dict[int, str] = {}
    open_input = True
    pending = b""  # read but not yet a whole line: requests sent together arrive in one read
    while open_input or children:
        ready, _, _ = select.select([0] if open_input else [], [], [],
                                    REAP_SEC if children else None)
        if ready:
            chunk = os.read(0, 65536)
            if not chunk:
                open_input = False  # the client is gone: finish the children, then stop
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                req = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    _child(req)
                children[pid] = req["id"]
                _say({"id": req["id"], "pid": pid})
        reap(children, _say)


class ForkedProcess(Child):
    """A child of the fork server, seen from the test (the parts of ``Popen`` tests use)."""

    stdout = None
    stderr = None

    def __init__(self, pid: int, out: Path, ended: threading.Event, status: Status) -> None:
        super().__init__(pid, ended, status)
        self.out = out

    def communicate(self, timeout: float | None = None) -> tuple[str, None]:
        self.wait(timeout)
        return self.out.read_text(errors="replace"), None


def _scratch(suffix: str) -> Path:
    """A new empty file for a child's output."""
    fd, name = tempfile.mkstemp(prefix="harness-forkrun-", suffix=suffix)
    os.close(fd)
    return Path(name)


@dataclass
class Finished:
    returncode: int
    output: str


class ForkServer:
    """The client: one server process, started on first use, shared by the test's threads.
    ``preload``: modules the server imports beyond :data:`PRELOAD` (for runs that import a
    slow module anyway, such as litellm's seconds); ``env``: the server's own environment
    beyond the test's, for those imports (each run gets the environment it asks for)."""

    def __init__(self, preload: tuple[str, ...] = (), env: dict[str, str] | None = None) -> None:
        self.preload = preload
        self.env = dict(env or {})
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()
        self._pending = Pending()
        self._ids = itertools.count()

    def _server(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            env = {k: v for k, v in os.environ.items()
                   if k not in ("PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS")}
            env.update(self.env)
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.forkrun", *self.preload],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                cwd=Path(__file__).parents[2],
            )  # fmt: skip
            threading.Thread(target=self._read, args=(self._proc,), daemon=True,
                             name="forkrun-reader").start()
        return self._proc

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self._pending.answer(json.loads(line))
        self._pending.abandon()  # the server ended: nothing pending will ever be answered

    def spawn(self, module: str, argv: list[str], cwd: Path, env: dict[str, str],
              out: Path, err: Path | None = None) -> ForkedProcess:
        """Start ``python -m MODULE ARGV`` in CWD with ENV, its output into OUT (its stderr
        into ERR, when given)."""
        with self._lock:
            proc = self._server()
            assert proc.stdin is not None
            req_id = str(next(self._ids))
            started, ended, status = self._pending.add(req_id)
            proc.stdin.write(json.dumps({"id": req_id, "module": module, "argv": argv,
                                         "cwd": str(cwd), "env": env, "out": str(out),
                                         "err": str(err) if err else None}) + "\n")
            proc.stdin.flush()
        if not started.wait(60) or "pid" not in status:
            raise RuntimeError("the fork server did not start the child")
        return ForkedProcess(status["pid"], out, ended, status)

    def run(self, argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> Finished:
        """Run ``python -m pytest ARGV`` to its end; on timeout kill its process group and
        raise ``subprocess.TimeoutExpired``."""
        done = self.call("pytest", argv, cwd, env, timeout, stderr_apart=False)
        return Finished(done.returncode, done.stdout)

    def call(self, module: str, argv: list[str], cwd: Path, env: dict[str, str],
             timeout: float, *, stderr_apart: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``python -m MODULE ARGV`` to its end, as ``subprocess.run(...,
        capture_output=True, text=True)`` would (stderr in stdout unless ``stderr_apart``);
        on timeout kill its process group and raise ``subprocess.TimeoutExpired``."""
        out = _scratch(".out")
        err = _scratch(".err") if stderr_apart else None
        try:
            child = self.spawn(module, argv, cwd, env, out, err)
            try:
                rc = child.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                raise subprocess.TimeoutExpired(
                    [module, *argv], timeout, out.read_text(errors="replace"),
                    err.read_text(errors="replace") if err else None) from None
            return subprocess.CompletedProcess(
                [module, *argv], rc, out.read_text(errors="replace"),
                err.read_text(errors="replace") if err else "")
        finally:
            for path in (out, err):
                if path is not None:
                    path.unlink(missing_ok=True)

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None


if __name__ == "__main__":
    serve(tuple(sys.argv[1:]))
