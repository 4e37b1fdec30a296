"""The judge's interposition (issue 40): while a test runs, every process it starts runs as
the program user, with the temporary files and folders the test made handed to it; the
judge itself stays root. No Docker: pytest runs here (as root, like the eval's judge) with
the results guard loaded, as the docker policy loads it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from benchmarks.programbench import results_guard_plugin
from benchmarks.programbench.program_user import HOME_ENV, PROGRAM_UID, UID_ENV

TESTS = '''
import os, subprocess, tempfile, pty
import pytest

# the program run when the module is imported (collection), and for a parametrization
AT_IMPORT = subprocess.run(["id", "-u"], capture_output=True, text=True).stdout.strip()


def test_a_program_run_at_import_ran_as_the_program_user():
    assert AT_IMPORT == "{uid}"


@pytest.mark.parametrize("uid", [subprocess.check_output(["id", "-u"], text=True).strip()])
def test_and_one_run_for_a_parametrization(uid):
    assert uid == "{uid}"


def test_what_a_test_writes_is_the_programs_to_write(tmp_path, tmp_path_factory):
    data = tmp_path / "data.txt"
    data.write_text("a\\n")
    sub = tmp_path / "sub"
    sub.mkdir()
    made = tmp_path_factory.mktemp("w")
    here = "in-" + str(os.getpid()) + ".txt"
    with open(here, "w") as fh:
        fh.write("a\\n")
    script = (f"echo b >> {{data}} && echo c > {{sub}}/out && echo d > {{made}}/out && "
              f"echo e >> {{here}}")
    subprocess.run(["sh", "-c", script], check=True)
    assert data.read_text() == "a\\nb\\n" and (sub / "out").exists()
    assert (made / "out").exists() and open(here).read() == "a\\ne\\n"
    os.unlink(here)

def test_a_test_process_runs_as_the_program_user():
    assert subprocess.run(["id", "-u"], capture_output=True, text=True).stdout.strip() == "{uid}"
    assert os.geteuid() == 0  # the judge is still root

def test_shell_and_system_and_exec_family():
    out = subprocess.check_output("id -u; echo $HOME", shell=True, text=True).split()
    assert out == ["{uid}", "{home}"]
    assert os.system("test $(id -u) = {uid}") == 0
    pid = os.fork()
    if pid == 0:
        os.execvp("sh", ["sh", "-c", "test $(id -u) = {uid}"])
    assert os.waitpid(pid, 0)[1] == 0

def test_posix_spawn_too(tmp_path):
    out = str(tmp_path / "uid")
    pid = os.posix_spawnp("sh", ["sh", "-c", "id -u"], dict(os.environ), file_actions=[
        (os.POSIX_SPAWN_OPEN, 1, out, os.O_WRONLY | os.O_CREAT, 0o644)])
    assert os.waitpid(pid, 0)[1] == 0
    assert open(out).read().strip() == "{uid}"


def test_the_judges_own_settings_stay_with_the_judge():
    env = subprocess.check_output(["env"], text=True)
    assert "PYTHONSAFEPATH" not in env and "HX_PROGRAM" not in env
    env = subprocess.check_output(["env"], text=True, env=os.environ)  # os.environ itself
    assert "PYTHONSAFEPATH" not in env and "HX_PROGRAM" not in env
    assert "PYTEST_DISABLE_PLUGIN_AUTOLOAD" not in env and "results_guard" not in env

def test_temporary_files_are_the_programs(tmp_path):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
        fh.write("2 + 3\\n")
    out = tmp_path / "out.txt"
    subprocess.run(["sh", "-c", f"cat {{fh.name}} > {{out}}"], check=True)
    assert out.read_text() == "2 + 3\\n"
    folder = tempfile.mkdtemp()
    subprocess.run(["touch", os.path.join(folder, "made")], check=True)
    assert os.path.exists(os.path.join(folder, "made"))

def test_the_program_cannot_touch_the_judge():
    me = os.getpid()
    code = ("import os, signal\\n"
            "for f in (lambda: os.kill({{me}}, signal.SIGKILL),\\n"
            "          lambda: open('/proc/{{me}}/environ', 'rb').read(),\\n"
            "          lambda: open('/etc/hx-planted', 'w')):\\n"
            "    try:\\n"
            "        f(); print('REACHED')\\n"
            "    except PermissionError:\\n"
            "        print('denied')\\n").replace("{{me}}", str(me))
    out = subprocess.run(["python3", "-c", code], capture_output=True, text=True).stdout
    assert out.split() == ["denied"] * 3, out
'''


# The judge's pytest runs in a PID namespace of its own, as it does in its container: the
# results guard ends every process it does not spare, and on this host that would be every
# other test's (the Docker engine's exec clients, other runs' agents).
APART = ["unshare", "--fork", "--pid", "--mount-proc", "--kill-child"]
# A uid of this test's own: the kernel's rule ends every process of the uid on this host, and
# the eval's containers (run by other tests at once) use PROGRAM_UID.
UID = 62000 + secrets.randbelow(3000)
assert UID != PROGRAM_UID


def _run(tmp_path: Path, body: str, *, apart: bool = True,
         extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """pytest over ``body`` with the results guard loaded, as the docker policy starts it."""
    (tmp_path / "test_interposed.py").write_text(body)
    plugin = Path(results_guard_plugin.__file__)
    env = {**os.environ, "PYTHONPATH": str(plugin.parent), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
           "PYTHONSAFEPATH": "1"}
    if apart:
        env.update({UID_ENV: str(UID), HOME_ENV: "/tmp"})
    env.pop("PYTEST_ADDOPTS", None)
    tmp_path.chmod(0o1777)  # the judge's working folder, as /workspace is at test time
    return subprocess.run(
        [*APART, sys.executable, "-m", "pytest", "-p", "results_guard_plugin", "-q", "-p",
         "no:cacheprovider", *extra, str(tmp_path)], cwd=tmp_path, capture_output=True, text=True,
        env=env, stdin=subprocess.DEVNULL, timeout=120, check=False)


@pytest.mark.parametrize("workers", [(), ("-p", "xdist.plugin", "-n", "2")],
                         ids=["one-process", "xdist-workers"])
def test_every_process_a_test_starts_runs_as_the_program_user(
        tmp_path: Path, workers: tuple[str, ...]) -> None:
    """The judge's xdist workers start as root (they are the judge); the programs the tests
    run in them, as the program user."""
    assert os.geteuid() == 0, "the judge runs as root: run this test as root (as CI does)"
    run = _run(tmp_path, TESTS.format(uid=UID, home="/tmp"), extra=workers)
    assert "9 passed" in run.stdout, run.stdout + run.stderr
    assert "HX-PYTEST-ACCOUNT - passed=9" in run.stderr


def test_without_the_program_user_nothing_is_interposed(tmp_path: Path) -> None:
    body = ("import subprocess\n\ndef test_root():\n    assert subprocess.check_output("
            "['id', '-u'], text=True).strip() == '0'\n")
    run = _run(tmp_path, body, apart=False)
    assert "1 passed" in run.stdout, run.stdout + run.stderr


def test_every_process_of_the_program_user_is_ended_before_the_verdict(tmp_path: Path) -> None:
    """A daemon the program leaves writes the time every 20 ms: its last write is older than
    the results file, which pytest writes after the guard ended it."""
    drop = Path(tempfile.mkdtemp(dir="/tmp"))  # a folder the program user can write
    drop.chmod(0o777)
    beats = drop / "beats"
    loop = f"while :; do date +%s.%N >> {beats}; sleep 0.02; done"
    body = ("import subprocess, time\n\ndef test_leaves_a_daemon():\n"
            f"    subprocess.run(['sh', '-c', 'setsid sh -c \"{loop}\" >/dev/null 2>&1 &'],"
            " check=True)\n"
            "    time.sleep(0.5)\n")
    xml = tmp_path / "results.xml"
    run = _run(tmp_path, body, extra=("--junitxml", str(xml)))
    assert "1 passed" in run.stdout, run.stdout + run.stderr
    last = float(beats.read_text().split()[-1])
    shutil.rmtree(drop)
    assert last < xml.stat().st_mtime, "the program's daemon outlived the verdict"


def test_the_kernels_rule_ends_every_process_of_the_program_uid(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``end_program_processes`` alone (the table of spared processes plays no part): each
    process of the uid is ended, its own session and parent whatever they are."""
    monkeypatch.setattr(results_guard_plugin, "APART", True)
    monkeypatch.setattr(results_guard_plugin, "PROGRAM_UID", UID)
    procs = [subprocess.Popen(["sleep", "300"], user=UID, group=UID,
                              extra_groups=[], start_new_session=True) for _ in range(3)]
    results_guard_plugin.end_program_processes()
    assert [p.wait(timeout=10) for p in procs] == [-9, -9, -9]


def test_a_worker_that_ends_first_leaves_the_others_programs_alone(tmp_path: Path) -> None:
    """xdist: a worker's session ends while another worker's test still runs its program;
    only the controller ends the program user's processes, once every worker is done."""
    body = ("import subprocess\n\n"
            "def test_quick():\n    pass\n\n"
            "def test_slow_program():\n"
            "    out = subprocess.run(['sh', '-c', 'sleep 2; echo done'], capture_output=True,"
            " text=True)\n"
            "    assert (out.returncode, out.stdout) == (0, 'done\\n')\n")
    run = _run(tmp_path, body, extra=("-p", "xdist.plugin", "-n", "2"))
    assert "2 passed" in run.stdout, run.stdout + run.stderr


def test_the_names_pytest_reads_in_the_workspace_are_the_judges(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A package-layout branch makes pytest climb into the workspace root: its __init__.py
    (the submission's) would run in the judge, and a conftest.py or ini file the program
    makes there would load in a worker that starts later. After the judge's prefix, none
    can: the names are the judge's (folders for conftest.py and __init__.py)."""
    from benchmarks.programbench import program_user

    ws = tmp_path / "ws"
    marker = tmp_path / "imported-as-root"
    (ws / "eval" / "tests").mkdir(parents=True)
    for rel in ("eval/__init__.py", "eval/tests/__init__.py"):
        (ws / rel).write_text("")
    (ws / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    plant = ("import subprocess\n\ndef test_plants():\n"
             "    r = subprocess.run(['sh', '-c', 'echo \"raise SystemExit(9)\" > conftest.py;"
             " printf \"[pytest]\\\\naddopts = -x --bogus\\\\n\" > pytest.ini'],"
             " capture_output=True, text=True)\n"
             "    assert r.returncode != 0  # both names are the judge's\n")
    (ws / "eval" / "tests" / "test_plant.py").write_text(plant)
    os.chown(ws, PROGRAM_UID, PROGRAM_UID)
    monkeypatch.setattr(program_user, "WORKSPACE", str(ws))
    subprocess.run(["sh", "-c", program_user.pytest_names_script()], check=True)
    assert (ws / "__init__.py").is_dir() and (ws / "conftest.py").is_dir()
    ws.chmod(0o1777)
    os.chown(ws, 0, 0)
    for _ in range(2):  # the second session is the later worker: nothing planted loads
        run = _run_in(ws, "eval/tests")
        assert "1 passed" in run.stdout, run.stdout + run.stderr
    assert not marker.exists()


def _run_in(ws: Path, tests: str) -> subprocess.CompletedProcess[str]:
    plugin = Path(results_guard_plugin.__file__)
    env = {**os.environ, "PYTHONPATH": str(plugin.parent), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
           "PYTHONSAFEPATH": "1", UID_ENV: str(UID), HOME_ENV: "/tmp"}
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run([*APART, sys.executable, "-m", "pytest", "-p", "results_guard_plugin", "-q",
                           "-p", "no:cacheprovider", tests], cwd=ws, capture_output=True,
                          text=True, env=env, stdin=subprocess.DEVNULL, timeout=120,
                          check=False)
