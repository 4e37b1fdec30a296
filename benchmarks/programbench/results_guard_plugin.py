"""A pytest plugin the docker policy installs into each test container of the official eval
(under a random module name, so no submission file can shadow it).

The program under test runs as root in the same container as pytest; a process it leaves
behind could rewrite ``eval/results.xml`` after pytest writes it (drop the failures: every
test "passes"). Before pytest's JUnit writer runs (``tryfirst`` on ``pytest_sessionfinish``),
every process is ended except pytest itself, its ancestors (``run.sh``, the exec's shell),
its children started before the test loop (xdist workers; not a process a test made its
child with ``clone(CLONE_PARENT)``), and the processes outside its tree that started before
it, or under one that did (the container's init and keep-alive, the exec's output filters);
a results path that is not a regular file is removed so the writer creates a fresh one.
Nothing of the submission is alive when the verdict is written or read.

pytest's own account (how many tests passed) is printed last on stderr with the eval call's
key, which the docker policy feeds on this pytest's stdin and which is read here at import,
before any test runs the program; pytest then turns non-dumpable, so the program (root, but
without CAP_SYS_PTRACE) cannot read its memory, environment or descriptors. The host holds
each results file against that account (``official_eval.check_pytest_account``). The
official eval's plugins are loaded here (``pytest_plugins``): the policy turns autoload off.

A process whose thread-group leader exited shows as a zombie while its other threads run:
it counts as live (and is ended) while any of its threads is not a zombie.

The shell that runs ``run.sh`` reads the script as it goes, so a program could append a line
that runs after pytest (and rewrites the verdict there). The script's bytes are read when this
plugin loads (before any test runs the program) through the shell's own descriptor, and put
back once every foreign process is ended: the shell then reads on in the script as it was.

Standard library and pytest only: this file is copied into the container as it is.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import pytest

ROUNDS = 50


RUN_SCRIPT = "/eval/run.sh"


def _stat(path: str) -> list[bytes] | None:
    """The fields of a ``/proc/.../stat`` file after the command name (state first), or
    None when it is gone or torn."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
        return data[data.rindex(b")") + 2 :].split()
    except (OSError, ValueError):
        return None


def _dead(fields: list[bytes]) -> bool:
    return fields[0] in (b"Z", b"X")


def _live_threads(pid: str) -> bool:
    """Whether any thread of ``pid``'s thread group is still alive."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    return any((f := _stat(f"/proc/{pid}/task/{tid}/stat")) and not _dead(f) for tid in tids)


def _script_path() -> str | None:
    """``/proc/<ppid>/fd/N``: the script the parent shell reads (``run.sh``), if it is one."""
    folder = f"/proc/{os.getppid()}/fd"
    try:
        fds = os.listdir(folder)
    except OSError:
        return None
    for fd in fds:
        try:
            target = os.readlink(f"{folder}/{fd}")
        except OSError:
            continue
        if target.removesuffix(" (deleted)").endswith(RUN_SCRIPT):
            return f"{folder}/{fd}"
    return None


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


SCRIPT = _script_path()
SCRIPT_BYTES = _read(SCRIPT)  # as it was when pytest started, before any test ran


def _account_key() -> str:
    """The eval call's key, which the docker policy feeds on this pytest's stdin (read here,
    at import, before a test runs the program; never in an xdist worker, whose stdin is its
    channel). Then this process becomes non-dumpable: without CAP_SYS_PTRACE (the eval's
    containers have none) no other process reads its memory, environment or descriptors."""
    if sys.argv[:1] == ["-c"]:
        return ""
    key = ""
    try:
        if select.select([0], [], [], 5.0)[0]:
            key = os.read(0, 128).decode("ascii", "replace").strip()
    except (OSError, ValueError):
        key = ""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    return key if key.isalnum() else ""


ACCOUNT_KEY = _account_key()
# The judge's pytest loads no plugin by entry point (the docker policy turns autoload off):
# the official eval's own plugins are loaded here, those of them the test image has (a
# submission module of one of these names is removed by the scorer guard).
EVAL_PLUGINS = ("xdist.plugin", "xdist.looponfail", "pytest_timeout", "pytest_rerunfailures")
pytest_plugins = [m for m in EVAL_PLUGINS
                  if importlib.util.find_spec(m.split(".")[0]) is not None]
LOOP_STARTED: list[float] = []  # clock ticks since boot when the test loop began


def _ticks_now() -> float:
    with open("/proc/uptime", encoding="ascii") as fh:
        return float(fh.read().split()[0]) * os.sysconf("SC_CLK_TCK")


def restore_script() -> bool:
    """Put the parent shell's script back as it was at start; whether it had changed."""
    if SCRIPT is None or SCRIPT_BYTES is None:
        return False
    try:
        with open(SCRIPT, "r+b") as fh:
            if fh.read() == SCRIPT_BYTES:
                return False
            fh.seek(0)
            fh.write(SCRIPT_BYTES)
            fh.truncate()
    except OSError:
        return False
    return True


def _table() -> dict[int, tuple[int, int]]:
    """``{pid: (ppid, start time)}`` of the live processes (a zombie leader whose other
    threads run is live)."""
    out: dict[int, tuple[int, int]] = {}
    for name in os.listdir("/proc"):
        fields = _stat(f"/proc/{name}/stat") if name.isdigit() else None
        if not fields or len(fields) < 20 or (_dead(fields) and not _live_threads(name)):
            continue
        out[int(name)] = (int(fields[1]), int(fields[19]))
    return out


def _outside_and_older(pid: int, me: int, table: dict[int, tuple[int, int]]) -> bool:
    """Whether ``pid`` is outside pytest's tree and it, or a process above it below init,
    started no later than pytest: the container's own processes and the exec's shells and
    output filters (their ``wc`` starts late, under a filter that started early). The
    program under test runs only once pytest has started, so every process of the
    submission is pytest's descendant or, orphaned, a child of init started after it."""
    start = table[me][1]
    seen: set[int] = set()
    while pid in table and pid not in seen and pid not in (0, 1):
        if pid == me:
            return False
        seen.add(pid)
        if table[pid][1] <= start:
            return not _under(pid, me, table)
        pid = table[pid][0]
    return False


def _under(pid: int, me: int, table: dict[int, tuple[int, int]]) -> bool:
    seen: set[int] = set()
    while pid in table and pid not in seen and pid not in (0, 1):
        if pid == me:
            return True
        seen.add(pid)
        pid = table[pid][0]
    return False


def _kept(table: dict[int, tuple[int, int]]) -> set[int]:
    me = os.getpid()
    keep = {1, me}
    pid = me
    while pid in table and table[pid][0] > 0 and table[pid][0] not in keep:
        pid = table[pid][0]
        keep.add(pid)
    # pytest's own children: its xdist workers, started before the test loop; a process a
    # test makes a child of pytest later (clone with CLONE_PARENT) is not spared
    loop = LOOP_STARTED[0] if LOOP_STARTED else float("inf")
    keep |= {p for p, (parent, start) in table.items() if parent == me and start <= loop}
    if me in table:
        keep |= {p for p in table if p not in keep and _outside_and_older(p, me, table)}
    return keep


def end_foreign_processes() -> int:
    """SIGKILL every process outside :func:`_kept`, until none is left; how many."""
    ended = 0
    for _ in range(ROUNDS):
        table = _table()
        keep = _kept(table)
        foreign = [p for p in table if p not in keep]
        if not foreign:
            break
        for pid in foreign:
            try:
                os.kill(pid, signal.SIGKILL)
                ended += 1
            except OSError:
                pass
    return ended


# The program user (see benchmarks.programbench.program_user): the docker policy exports its
# uid and home to the judge. While a test runs, every process it starts runs as that user.
PROGRAM_UID = int(os.environ.get("HX_PROGRAM_UID", "-1") or -1)
PROGRAM_HOME = os.environ.get("HX_PROGRAM_HOME", "/")
JUDGE_ONLY_ENV = ("PYTHONSAFEPATH", "HX_PROGRAM_UID", "HX_PROGRAM_HOME")
APART = PROGRAM_UID > 0 and os.geteuid() == 0 and sys.version_info >= (3, 9)
GUARD_MODULE = __name__
GUARD_FOLDER = os.path.dirname(os.path.abspath(__file__))


def _judge_call() -> bool:
    """Whether the process being started is the judge's own: an xdist worker, which
    execnet's ``Popen`` starts (at the session's start or on a restart), never a program a
    test or a module runs (a worker runs its tests under execnet too: only the frame that
    calls ``Popen`` counts)."""
    caller = sys._getframe(2).f_globals.get("__name__", "")
    return str(caller).startswith("execnet.")


def _program_env(env: Any) -> Any:
    """The environment a program gets: the judge's own settings taken out (what the docker
    policy added to run.sh's: this plugin's folder and ``-p``, autoload off, safe path), and
    the program's home (the one its build had) for root's."""
    if env is not None and not hasattr(env, "items"):
        return env
    base = dict(os.environ if env is None else env)  # os.environ itself too
    out = {k: v for k, v in base.items()
           if k not in (*JUDGE_ONLY_ENV, "PYTEST_DISABLE_PLUGIN_AUTOLOAD")}
    paths = [p for p in str(out.get("PYTHONPATH", "")).split(os.pathsep)
             if p and p != GUARD_FOLDER]
    out["PYTHONPATH"] = os.pathsep.join(paths)
    opts = str(out.get("PYTEST_ADDOPTS", "")).replace(f"-p {GUARD_MODULE}", "").strip()
    out["PYTEST_ADDOPTS"] = opts
    for name in ("PYTHONPATH", "PYTEST_ADDOPTS"):
        if not out[name]:
            del out[name]
    if out.get("HOME") in (None, "/root", "/"):
        out["HOME"] = PROGRAM_HOME
    return out


def drop_to_program_user() -> None:
    """This process as the program user, no supplementary group (in a child about to exec)."""
    os.setgroups([])
    os.setgid(PROGRAM_UID)
    os.setuid(PROGRAM_UID)


def _interpose() -> None:
    """Run every process the tests start as the program user, from this plugin's import on
    (a module, a parametrization, a fixture or a test body: the program never runs as root):
    ``subprocess.Popen`` (and through it ``run``, ``check_output``, ``os.popen``, asyncio),
    ``os.system`` and the ``os.exec*`` family (``pty.spawn``, ``pexpect``, ``os.spawn*``).
    The tests' calls are unchanged. Only the judge's own workers start as root."""
    popen_init = subprocess.Popen.__init__

    def init(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
        if kwargs.get("user") is None and kwargs.get("group") is None and not _judge_call():
            hand_over()
            kwargs.update(user=PROGRAM_UID, group=PROGRAM_UID, extra_groups=[],
                          env=_program_env(kwargs.get("env")))
        popen_init(self, *args, **kwargs)

    subprocess.Popen.__init__ = init  # type: ignore[method-assign]

    def system(command: Any) -> int:
        status = subprocess.call(["/bin/sh", "-c", command])
        return status << 8 if status >= 0 else -status

    os.system = system
    for name in ("execv", "execve", "execvp", "execvpe", "execl", "execle", "execlp",
                 "execlpe"):
        setattr(os, name, _dropping(getattr(os, name)))
    for name in ("posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            setattr(os, name, _spawning(name == "posix_spawnp"))


SYSTEM = os.system


def _dropping(original: Any) -> Any:
    def exec_as_program(*args: Any) -> Any:
        if os.geteuid() == 0:
            hand_over()
            os.environ.clear()
            os.environ.update(_program_env(None))
            drop_to_program_user()
        return original(*args)

    return exec_as_program


def _spawning(search: bool) -> Any:
    """``os.posix_spawn[p]`` as a fork and an ``exec`` as the program user (the file
    actions, ``setpgroup`` and ``setsid`` applied in the child)."""
    def spawn(path: Any, argv: Any, env: Any, *, file_actions: Any = None,
              setpgroup: Any = None, setsid: bool = False, **_: Any) -> int:
        pid = os.fork()
        if pid:
            return pid
        try:
            for action in file_actions or ():
                _file_action(action)
            if setsid:
                os.setsid()
            elif setpgroup is not None:
                os.setpgid(0, setpgroup)
            (os.execvpe if search else os.execve)(path, argv, env)
        finally:
            os._exit(127)

    return spawn


def _file_action(action: Any) -> None:
    kind = action[0]
    if kind == os.POSIX_SPAWN_OPEN:
        fd = os.open(action[2], action[3], action[4])
        if fd != action[1]:
            os.dup2(fd, action[1])
            os.close(fd)
    elif kind == os.POSIX_SPAWN_CLOSE:
        os.close(action[1])
    elif kind == os.POSIX_SPAWN_DUP2:
        os.dup2(action[1], action[2])


SHARED: list[str] = []  # the temporary folders of the tests, handed to the program user
STARTED = time.time()  # what the tests make in the working folder is newer
HANDOVER_LIMIT = 20000  # entries looked at per process start


def hand_over() -> None:
    """What the tests made for the program (files and folders in their temporary folders,
    files new in the working folder) becomes the program user's before a process starts,
    modes kept: the program writes, renames and appends to them as it would as root."""
    seen = 0
    for top in SHARED:
        for folder, dirs, files in os.walk(top):
            for name in (*dirs, *files):
                seen += 1
                if seen > HANDOVER_LIMIT:
                    return
                _own(os.path.join(folder, name))
    with contextlib.suppress(OSError):
        for entry in os.scandir("."):
            if entry.name not in KEPT_NAMES and entry.stat(follow_symlinks=False).st_ctime \
                    >= STARTED:
                _own(entry.path)


KEPT_NAMES = frozenset({"eval", "conftest.py", "__init__.py", "pytest.ini", ".pytest.ini",
                        "pyproject.toml", "tox.ini", "setup.cfg"})


def _own(path: str) -> None:
    with contextlib.suppress(OSError):
        if os.lstat(path).st_uid == 0:
            os.lchown(path, PROGRAM_UID, PROGRAM_UID)


def _share(path: str) -> None:
    """A temporary file or folder a test made, handed to the program user (its folders
    above searchable), so the program reads and writes it as it would as root."""
    with contextlib.suppress(OSError):
        os.chown(path, PROGRAM_UID, PROGRAM_UID)
        if os.path.isdir(path) and not os.path.islink(path):
            SHARED.append(os.path.abspath(path))
        parent = os.path.dirname(os.path.abspath(path))
        while parent not in ("/", "/tmp", "") and os.stat(parent).st_uid == 0:
            mode = os.stat(parent).st_mode & 0o7777
            os.chmod(parent, mode | 0o011)
            parent = os.path.dirname(parent)


def _sharing_temp() -> None:
    mkdtemp, mkstemp, named = tempfile.mkdtemp, tempfile.mkstemp, tempfile.NamedTemporaryFile

    def share_dir(*args: Any, **kwargs: Any) -> Any:
        path = mkdtemp(*args, **kwargs)
        _share(os.fsdecode(path))
        return path

    def share_file(*args: Any, **kwargs: Any) -> Any:
        fd, path = mkstemp(*args, **kwargs)
        _share(os.fsdecode(path))
        return fd, path

    def share_named(*args: Any, **kwargs: Any) -> Any:
        handle = named(*args, **kwargs)
        if isinstance(getattr(handle, "name", None), str):
            _share(handle.name)
        return handle

    tempfile.mkdtemp, tempfile.mkstemp = share_dir, share_file
    tempfile.NamedTemporaryFile = share_named  # type: ignore[assignment]


if APART:
    _interpose()
    _sharing_temp()


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: Any) -> Any:
    """pytest's temporary folders (``tmp_path``, ``tmpdir``, ``tmp_path_factory.mktemp``)
    are root's, mode 0700: handed to the program user as they are made."""
    outcome = yield
    if not APART or fixturedef.argname not in ("tmp_path", "tmpdir", "tmp_path_factory",
                                               "tmpdir_factory"):
        return
    value = outcome.get_result()
    if fixturedef.argname.endswith("_factory"):
        _share_factory(value)
    elif value is not None:
        _share(os.fspath(value))


def _share_factory(factory: Any) -> None:
    """``tmp_path_factory.mktemp`` folders, handed over as they are made."""
    made = getattr(factory, "mktemp", None)
    if made is None or getattr(made, "hx_shared", False):
        return

    def mktemp(*args: Any, **kwargs: Any) -> Any:
        path = made(*args, **kwargs)
        _share(os.fspath(path))
        return path

    mktemp.hx_shared = True  # type: ignore[attr-defined]
    with contextlib.suppress(AttributeError, TypeError):
        object.__setattr__(factory, "mktemp", mktemp)


def end_program_processes() -> None:
    """SIGKILL every process of the program user, by the kernel's rule: ``kill(-1)`` sent as
    that user reaches each process of its uid (zombie leaders' threads, daemons, children
    reparented anywhere), until none is left."""
    if not APART:
        return
    pid = os.fork()
    if pid == 0:
        try:
            drop_to_program_user()
            for _ in range(ROUNDS * 20):
                os.kill(-1, signal.SIGKILL)
        except OSError:
            pass  # ESRCH: no process of the program user is left
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):
        # an xdist worker ends while others still run tests: ending processes here would
        # end theirs; the controller ends them all once every worker is done, before it
        # writes the results file
        return
    end_program_processes()
    end_foreign_processes()
    restore_script()
    xml = getattr(session.config.option, "xmlpath", None)
    if xml and os.path.lexists(xml) and (os.path.islink(xml) or not os.path.isfile(xml)):
        os.unlink(xml)


ACCOUNT_MARKER = "HX-PYTEST-ACCOUNT"


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    if not LOOP_STARTED:
        LOOP_STARTED.append(_ticks_now())


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """pytest's own account of the run, last on stderr, after the results file is written:
    how many tests passed (xpassed included, as JUnit reads them). The host holds the results
    file against it (``official_eval.check_pytest_account``)."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller has the account
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    stats = getattr(reporter, "stats", {})
    passed = sum(1 for r in stats.get("passed", []) if getattr(r, "when", "call") == "call")
    passed += len(stats.get("xpassed", []))
    os.write(2, f"\n{ACCOUNT_MARKER} {ACCOUNT_KEY or '-'} passed={passed} "
                f"plugins={plugin_versions()}\n".encode())


# distribution -> the module that shows it loaded in this pytest
ACCOUNTED_DISTS = (("pytest", "pytest"), ("pytest-xdist", "xdist"),
                   ("pytest-timeout", "pytest_timeout"),
                   ("pytest-rerunfailures", "pytest_rerunfailures"))


def plugin_versions() -> str:
    """``name==version`` of pytest and each official eval plugin loaded here, comma-joined
    (the resolved grader: pytest-rerunfailures 16.6.1 records each rerun, issue 45)."""
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for dist, module in ACCOUNTED_DISTS:
        if module not in sys.modules:
            continue
        try:
            found.append(f"{dist}=={version(dist)}")
        except PackageNotFoundError:
            found.append(f"{dist}==unknown")
    return ",".join(found) or "-"
