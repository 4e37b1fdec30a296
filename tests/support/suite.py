"""Run the ``selftest`` benchmark as a real pytest session in a subprocess (test helper).

Tests of the runner build a tiny suite in a temporary directory with :class:`Suite` and run
pytest on it, in normal or ``-n 2`` mode, then read the run root through :class:`Run`.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.forkrun import ForkedProcess, ForkServer

# Plugins a subprocess run does without: the cache (no state between runs), anyio's, whose
# start-up probes every async backend (importing trio: about 0.5 s a process, most of a
# small run; no suite here has an async test), and pytest-benchmark's (no suite benchmarks).
QUIET_PLUGINS = ("-p", "no:cacheprovider", "-p", "no:anyio", "-p", "no:benchmark")

_BASETEMPS = itertools.count()

# Every suite run retries an infrastructure failure at once, not after the product's default
# 1 s backoff: many tests fail instances on infrastructure on purpose (``"work": "infra"``),
# and that second of sleep each was a fifth of the Docker-free loop's wall time. Passed
# before the test's own arguments, so a test's ``--retry-infra-backoff`` wins (argparse
# keeps the last); tests/runner/test_retry_infra.py checks the backoff itself.
NO_RETRY_BACKOFF = ("--retry-infra-backoff", "0")


def private_basetemp(under: Path) -> list[str]:
    """``--basetemp`` for one subprocess run, a new folder under ``under``.

    Without it every run numbers a folder under the shared ``pytest-of-<user>`` and, in
    doing so, deletes the oldest ones: whichever run came first paid for removing an
    earlier session's trees (seconds for a 10,000-folder run root), at a random test.
    """
    parent = under / ".basetemp"
    parent.mkdir(parents=True, exist_ok=True)  # pytest makes the folder, not its parents
    return ["--basetemp", str(parent / f"{os.getpid()}-{next(_BASETEMPS)}")]

# One warm fork server per test process, for the runs that go to their end (``Suite.run``,
# :func:`run_pytest`); ended when the process exits (its stdin closes).
FORK_SERVER = ForkServer()
atexit.register(FORK_SERVER.close)
# The runs of ``--agent mini-swe-agent`` import litellm (about 3 CPU-s each); their own
# server has it loaded already, imported as the harness imports it (offline: litellm reads
# its own copy of the price map). Started only in a process that has such a run.
MINI_SWE_SERVER = ForkServer(preload=("litellm",), env={"LITELLM_LOCAL_MODEL_COST_MAP": "True"})
atexit.register(MINI_SWE_SERVER.close)

SUITE_CONFTEST = 'pytest_plugins = ["harness.testing.plugin"]\n'
SUITE_TEST = '''
import pytest
from harness.testing.adapter import run_selftest_instance

pytestmark = pytest.mark.harness_benchmark("selftest")


def test_selftest(harness_instance, request):
    run_selftest_instance(harness_instance, request)
'''


def pytest_result(rc: int | None, out: str) -> pytest.RunResult:
    """A finished session's exit code and output as pytest's own :class:`pytest.RunResult`.

    The fork server merges the child's stderr into its stdout, so every line is in
    ``result.stdout`` (``fnmatch_lines``, ``re_match_lines``, ``no_fnmatch_line``) and
    ``result.stderr`` is empty; ``assert_outcomes`` reads the ``-q`` summary line. An exit
    code not yet known (``None``) reads -1, as in :meth:`Run.of`.
    """
    return pytest.RunResult(-1 if rc is None else rc, out.splitlines(), [], 0.0)


@dataclass
class Run:
    rc: int
    out: str
    root: Path

    @property
    def result(self) -> pytest.RunResult:
        """This run as a :class:`pytest.RunResult`: ``run.result.stdout.fnmatch_lines([...])``,
        ``run.result.assert_outcomes(passed=1)`` (see :func:`pytest_result`)."""
        return pytest_result(self.rc, self.out)

    @classmethod
    def of(cls, root: Path) -> Run:
        """Read a run root that a started (not yet finished) process writes."""
        return cls(-1, "", root)

    @property
    def manifest(self) -> dict[str, Any]:
        return json.loads((self.root / "run_manifest.json").read_text())

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The ledger's rows (a torn last line, e.g. after SIGKILL, is skipped)."""
        from harness.run.ledger import ledger_path, read_ledger

        read = read_ledger(ledger_path(self.root))
        return [r.model_dump(mode="json", by_alias=True) for r in read.rows]

    @property
    def latest(self) -> dict[str, dict[str, Any]]:
        return {r["instance_id"]: r for r in self.rows}

    def statuses(self) -> dict[str, str]:
        return {k: v["status"] for k, v in self.latest.items()}

    def executions(self) -> list[str]:
        path = self.root / "selftest_executions.log"
        if not path.exists():
            return []
        return [line.split()[0] for line in path.read_text().splitlines()]


class Suite:
    """A selftest benchmark suite on disk and a way to run pytest on it."""

    def __init__(self, path: Path, extra_env: dict[str, str] | None = None) -> None:
        self.path = path
        self.extra_env = dict(extra_env or {})  # added to each run's environment
        (path / "conftest.py").write_text(SUITE_CONFTEST)
        (path / "test_selftest.py").write_text(SUITE_TEST)
        self.counter = 0
        self.started = 0
        self.default_args: tuple[str, ...] = NO_RETRY_BACKOFF  # () runs the product's defaults

    def tasks(self, tasks: list[dict[str, Any]]) -> Path:
        path = self.path / "tasks.json"
        path.write_text(json.dumps(tasks))
        return path

    def command(self, root: Path | None, *args: str) -> list[str]:
        cmd = [sys.executable, "-m", "pytest", *QUIET_PLUGINS, "-q",
               "-o", "console_output_style=classic", str(self.path / "test_selftest.py")]
        if root is not None:
            cmd += ["--run-root", str(root)]
        return cmd + private_basetemp(self.path) + [*self.default_args, *args]

    def env(self) -> dict[str, str]:
        env = run_env()
        env["HARNESS_SELFTEST_TASKS"] = str(self.path / "tasks.json")
        env.update(self.extra_env)
        return env

    def new_root(self) -> Path:
        self.counter += 1
        return self.path / "runs" / f"r{self.counter}"

    def run(self, *args: str, root: Path | None = None, timeout: float = 120) -> Run:
        """Run pytest on the suite to its end (a fork of the warm server, see :mod:`.forkrun`)."""
        root = root or self.new_root()
        done = FORK_SERVER.run(self.command(root, *args)[3:], self.path, self.env(), timeout)
        return Run(done.returncode, done.output, root)

    def start(self, *args: str, root: Path | None = None) -> tuple[ForkedProcess, Path]:
        """Start pytest on the suite and return at once (a fork of the warm server, leading
        its own session: signal it, or its process group, by ``pid``)."""
        root = root or self.new_root()
        self.started += 1
        out = self.path / f".pytest-output-{self.started}.txt"
        proc = FORK_SERVER.spawn("pytest", self.command(root, *args)[3:], self.path,
                                 self.env(), out)
        return proc, root


def wait_for(predicate: Any, timeout: float = 30.0, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


def finish(proc: ForkedProcess, timeout: float = 60) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"pytest did not stop within {timeout}s:\n{out}") from None
    return out


REPO_ROOT = Path(__file__).resolve().parents[2]
# Variables of the tests' own pytest session that a run they start must not inherit.
SESSION_VARS = ("PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS")


def run_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a run a test starts: ENV (default: this process's) without
    :data:`SESSION_VARS`."""
    return {k: v for k, v in (os.environ if env is None else env).items()
            if k not in SESSION_VARS}


def run_pytest(target: str, root: Path, *args: str, env: dict[str, str] | None = None,
               timeout: float = 900) -> Run:
    """Run ``pytest <target> --run-root <root> <args>`` from the repository root."""
    full_env = run_env() | (env or {})
    server = MINI_SWE_SERVER if "mini-swe-agent" in args else FORK_SERVER
    done = server.run([*QUIET_PLUGINS, "-q", target, "--run-root", str(root),
                       *private_basetemp(root.parent), *args],
                      REPO_ROOT, full_env, timeout)
    return Run(done.returncode, done.output, root)


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO_ROOT,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m harness.cli ARGS``, as ``subprocess.run(..., capture_output=True,
    text=True)`` gives it (stdout and stderr apart), in a fork of the warm server: ENV is the
    whole environment (default: this process's)."""
    return FORK_SERVER.call("harness.cli", list(args), cwd, run_env(env), timeout)
