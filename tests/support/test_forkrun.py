"""The fork server the plugin tests run pytest through: each run is its own process."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.forkrun import ForkServer

PROBE = '''
import os, signal, sys

def test_probe():
    print("PROBE", os.getpid(), os.getsid(0), os.getcwd(), os.environ.get("FORKRUN_PROBE"),
          signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, flush=True)
    os.environ["FORKRUN_PROBE"] = "leaked"
    assert os.environ.get("FORKRUN_FAIL") != "1"
'''


def probe(server: ForkServer, where: Path, env: dict[str, str]) -> tuple[int, list[str]]:
    done = server.run(["-q", "-s", "-p", "no:cacheprovider", str(where / "test_probe.py")],
                      where, {**os.environ, **env}, timeout=60)
    line = next(x for x in done.output.splitlines() if x.startswith("PROBE"))
    return done.returncode, line.split()[1:]


def test_each_run_is_a_fresh_process_with_its_own_cwd_env_and_exit_status(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for d in ("a", "b"):
        (tmp_path / d / "test_probe.py").write_text(PROBE)
    server = ForkServer()
    try:
        rc1, (pid1, sid1, cwd1, env1, dfl1) = probe(server, tmp_path / "a", {"FORKRUN_PROBE": "one"})
        rc2, (pid2, sid2, cwd2, env2, _) = probe(
            server, tmp_path / "b", {"FORKRUN_PROBE": "two", "FORKRUN_FAIL": "1"}
        )
    finally:
        server.close()
    assert (rc1, rc2) == (0, 1)  # pytest's own exit statuses: passed, then a failed test
    assert pid1 != pid2 and pid1 != str(os.getpid())
    assert sid1 == pid1 and sid2 == pid2  # each run leads its own session (killpg works)
    assert (cwd1, cwd2) == (str(tmp_path / "a"), str(tmp_path / "b"))
    assert (env1, env2) == ("one", "two")  # the first run's change did not reach the second
    assert dfl1 == "True"


def test_a_run_past_its_timeout_is_killed_and_the_server_goes_on(tmp_path: Path) -> None:
    (tmp_path / "test_slow.py").write_text("import time\n\ndef test_slow():\n    time.sleep(60)\n")
    (tmp_path / "test_probe.py").write_text(PROBE)
    server = ForkServer()
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            server.run(["-q", "-p", "no:cacheprovider", str(tmp_path / "test_slow.py")],
                       tmp_path, dict(os.environ), timeout=0.5)
        rc, _ = probe(server, tmp_path, {})
    finally:
        server.close()
    assert rc == 0


def test_a_runs_pythonpath_reaches_it_and_its_xdist_workers(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "forkrun_marker_plugin.py").write_text(
        "def pytest_report_header():\n    return 'FORKRUN-PLUGIN-LOADED'\n")
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    pass\n")
    server = ForkServer()
    try:
        done = server.run(["-q", "-p", "no:cacheprovider", "-p", "forkrun_marker_plugin",
                           "-n", "2", str(tmp_path / "test_ok.py")], tmp_path,
                          {**os.environ, "PYTHONPATH": str(plugins)}, timeout=120)
    finally:
        server.close()
    assert done.returncode == 0, done.output  # the workers imported the plugin too
