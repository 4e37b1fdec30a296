"""The fork server the plugin tests run pytest through: each run is its own process, and so
is each xdist worker of a run (a fork of the run's zygote, in the run's process group)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.forkrun import ForkServer
from tests.support.suite import wait_for

PROBE = '''
import os, signal, sys

def test_probe():
    print("PROBE", os.getpid(), os.getsid(0), os.getcwd(), os.environ.get("FORKRUN_PROBE"),
          signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, flush=True)
    os.environ["FORKRUN_PROBE"] = "leaked"
    assert os.environ.get("FORKRUN_FAIL") != "1"
'''

# Run with -n 2: each worker writes what it is to $FORKRUN_WORKERS/<pid>.json, then waits
# for $FORKRUN_HOLD (if set) to exist or crashes on request.
WORKER_PROBE = '''
import json, os, signal, sys, time
from pathlib import Path

import pytest


@pytest.mark.parametrize("n", range(4))
def test_worker(n):
    out = Path(os.environ["FORKRUN_WORKERS"])
    out.mkdir(exist_ok=True)
    (out / f"{os.getpid()}.json").write_text(json.dumps({
        "pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgid(0), "sid": os.getsid(0),
        "cwd": os.getcwd(), "env": os.environ.get("FORKRUN_PROBE"),
        "worker": os.environ.get("PYTEST_XDIST_WORKER"),
        "sigint_default": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
        "sigterm_default": signal.getsignal(signal.SIGTERM) is signal.SIG_DFL,
        "stdin": os.readlink("/proc/self/fd/0"),  # execnet's: /dev/null once it has the pipes
        "bytecode": not sys.dont_write_bytecode,
    }))
    if os.environ.get("FORKRUN_CRASH") == str(n):
        os._exit(5)
    hold = os.environ.get("FORKRUN_HOLD")
    while hold and not Path(hold).exists():
        time.sleep(0.05)
'''


@pytest.fixture(scope="module")
def server() -> Iterator[ForkServer]:
    """One server for the module (its start-up, the preload, is most of a small run)."""
    server = ForkServer()
    yield server
    server.close()


def probe(server: ForkServer, where: Path, env: dict[str, str]) -> tuple[int, list[str]]:
    done = server.run(["-q", "-s", "-p", "no:cacheprovider", str(where / "test_probe.py")],
                      where, {**os.environ, **env}, timeout=60)
    line = next(x for x in done.output.splitlines() if x.startswith("PROBE"))
    return done.returncode, line.split()[1:]


def test_each_run_is_a_fresh_process_with_its_own_cwd_env_and_exit_status(
    tmp_path: Path, server: ForkServer
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for d in ("a", "b"):
        (tmp_path / d / "test_probe.py").write_text(PROBE)
    rc1, (pid1, sid1, cwd1, env1, dfl1) = probe(server, tmp_path / "a", {"FORKRUN_PROBE": "one"})
    rc2, (pid2, sid2, cwd2, env2, _) = probe(
        server, tmp_path / "b", {"FORKRUN_PROBE": "two", "FORKRUN_FAIL": "1"}
    )
    assert (rc1, rc2) == (0, 1)  # pytest's own exit statuses: passed, then a failed test
    assert pid1 != pid2 and pid1 != str(os.getpid())
    assert sid1 == pid1 and sid2 == pid2  # each run leads its own session (killpg works)
    assert (cwd1, cwd2) == (str(tmp_path / "a"), str(tmp_path / "b"))
    assert (env1, env2) == ("one", "two")  # the first run's change did not reach the second
    assert dfl1 == "True"


def test_a_run_past_its_timeout_is_killed_and_the_server_goes_on(
    tmp_path: Path, server: ForkServer
) -> None:
    (tmp_path / "test_slow.py").write_text("import time\n\ndef test_slow():\n    time.sleep(60)\n")
    (tmp_path / "test_probe.py").write_text(PROBE)
    with pytest.raises(subprocess.TimeoutExpired):
        server.run(["-q", "-p", "no:cacheprovider", str(tmp_path / "test_slow.py")],
                   tmp_path, dict(os.environ), timeout=0.5)  # fmt: skip
    rc, _ = probe(server, tmp_path, {})
    assert rc == 0


def test_a_runs_pythonpath_reaches_it_and_its_xdist_workers(
    tmp_path: Path, server: ForkServer
) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "forkrun_marker_plugin.py").write_text(
        "def pytest_report_header():\n    return 'FORKRUN-PLUGIN-LOADED'\n")
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    pass\n")
    done = server.run(["-q", "-p", "no:cacheprovider", "-p", "forkrun_marker_plugin",
                       "-n", "2", str(tmp_path / "test_ok.py")], tmp_path,
                      {**os.environ, "PYTHONPATH": str(plugins)}, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.output  # the workers imported the plugin too


def workers(folder: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def worker_run(server: ForkServer, tmp_path: Path, **env: str) -> subprocess.Popen[str]:
    (tmp_path / "test_workers.py").write_text(WORKER_PROBE)
    out = tmp_path / "run-output.txt"
    return server.spawn("pytest", ["-q", "-p", "no:cacheprovider", "-n", "2",  # type: ignore[return-value]
                                   str(tmp_path / "test_workers.py")], tmp_path,
                        {**os.environ, "FORKRUN_WORKERS": str(tmp_path / "workers"),
                         "FORKRUN_PROBE": "probe", **env}, out)  # fmt: skip


def test_xdist_workers_are_forks_in_the_runs_session_with_its_cwd_env_and_signals(
    tmp_path: Path, server: ForkServer
) -> None:
    proc = worker_run(server, tmp_path)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    seen = workers(tmp_path / "workers")
    assert {w["worker"] for w in seen} == {"gw0", "gw1"}, seen
    for w in seen:
        # the run leads its session and process group; its workers are in both (so the
        # group's signals reach them), forked from the run's zygote, not from the run itself
        assert (w["sid"], w["pgid"]) == (proc.pid, proc.pid), w
        assert w["ppid"] != proc.pid and w["pid"] != proc.pid
        assert (w["cwd"], w["env"]) == (str(tmp_path), "probe")
        assert w["sigint_default"] and w["sigterm_default"] and w["stdin"] == "/dev/null"
        assert w["bytecode"]


def test_a_sigkill_of_the_runs_process_group_kills_its_xdist_workers(
    tmp_path: Path, server: ForkServer
) -> None:
    hold = tmp_path / "never"
    proc = worker_run(server, tmp_path, FORKRUN_HOLD=str(hold))
    wait_for(lambda: len(list((tmp_path / "workers").glob("*.json"))) >= 2, timeout=60)
    pids = [int(str(w["pid"])) for w in workers(tmp_path / "workers")]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)

    def gone(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z"
        except FileNotFoundError:
            return True

    deadline = time.monotonic() + 10
    while not all(gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(gone(p) for p in pids), pids


def test_a_crashed_xdist_worker_is_reported_as_a_crashed_worker(
    tmp_path: Path, server: ForkServer
) -> None:
    proc = worker_run(server, tmp_path, FORKRUN_CRASH="1")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, out  # what `python -m pytest -n 2` says and exits with
    assert "node down: Not properly terminated" in out, out
    assert "crashed while running 'test_workers.py::test_worker[1]'" in out, out
    assert "1 failed, 3 passed" in out, out
