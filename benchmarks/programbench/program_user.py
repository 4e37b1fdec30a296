"""The user the submission's build and the program under test run as, apart from the judge.

The official eval runs ``compile.sh`` and the tests as root in one container, so a build or a
program can steer the judge through any file root can write (``/etc/ld.so.preload``, a
``pyvenv.cfg``, ``/etc/passwd``, a module on the judge's path) or rewrite its verdict. Lists
of such places always miss one more. So the docker policy gives the kernel the job:

* **the build** (``compile.sh``) runs as :data:`PROGRAM_USER` (uid :data:`PROGRAM_UID`, no
  supplementary groups, home :data:`PROGRAM_HOME`), in a container where setuid bits do not
  work (``no-new-privileges``). It can write its workspace, its home and the world-writable
  folders (``/tmp``), nothing else: a write to ``/etc``, ``/usr`` or ``/root`` fails with
  EPERM, whatever the path. What it left outside its workspace and home is removed before
  the build is committed (:func:`sweep_script`), so nothing of it waits in ``/tmp`` for the
  judge.
* **the judge** (``run.sh``, pytest, the results guard) runs as root, with the workspace root
  and ``eval/`` root's (:func:`judge_prefix`): the program cannot rename or write the tests,
  ``run.sh`` or the results file. Its Python starts with the working directory off
  ``sys.path`` (``PYTHONSAFEPATH``).
* **the program under test**: every process a test starts runs as :data:`PROGRAM_USER`
  (:mod:`~benchmarks.programbench.results_guard_plugin` interposes on ``subprocess``,
  ``os.system`` and the ``os.exec*`` family while a test runs), with the home its build
  had. It cannot signal, trace or read the judge, and before the verdict is written every
  process of its uid is killed by the kernel's own rule (``kill(-1)`` as that uid).

Standard library only: the policy imports this module on a docker call.
"""

from __future__ import annotations

import os
import shlex

PROGRAM_USER = "hxprog"
PROGRAM_UID = 61000  # far from the image's own users (agent is 1000)
PROGRAM_HOME = f"/home/{PROGRAM_USER}"
WORKSPACE = "/workspace"
# exported to the judge (run.sh's environment) for the results guard: not a secret
UID_ENV, HOME_ENV = "HX_PROGRAM_UID", "HX_PROGRAM_HOME"
# where the eval itself (as root) moves the built ``./executable`` until the tests: the
# program user's file, kept by the sweep
STASH = "/opt/programbench-stashed-executable-do-not-modify"


def build_setup_script() -> str:
    """Run as root in the compile container just before ``compile.sh``: the user, its home,
    and the workspace (wiped and unpacked by root) made the user's. ``chown`` by root also
    clears every setuid/setgid bit and file capability the submission's archive carried."""
    uid, user, home = PROGRAM_UID, PROGRAM_USER, PROGRAM_HOME
    # the shell's own read and echo, then two commands: each process costs on this engine
    missing = ("has() { while IFS=: read -r n _; do [ \"$n\" = " + user + " ] && return 0; "
               "done < \"$1\"; return 1; }; ")
    return (
        missing
        + f"has /etc/passwd || echo '{user}:x:{uid}:{uid}:program under test:{home}:/bin/sh'"
        f" >> /etc/passwd; has /etc/group || echo '{user}:x:{uid}:' >> /etc/group; "
        f"mkdir -p -m 0700 {home} && chown -R -h {uid}:{uid} {home} {WORKSPACE}"
    )


def build_exec_flags() -> list[str]:
    """``docker exec`` options of the build (its environment: the program user's)."""
    return ["-u", "0", "-e", f"HOME={PROGRAM_HOME}", "-e", f"USER={PROGRAM_USER}",
            "-e", f"LOGNAME={PROGRAM_USER}"]


# Becomes the program user and runs its arguments: setpriv (util-linux), else the judge's
# own Python (every eval image has it).
_DROP_PY = ("import os, sys; os.setgroups([]); os.setgid({uid}); os.setuid({uid}); "
            "os.execvp(sys.argv[1], sys.argv[1:])")


def build_command(shell: list[str]) -> list[str]:
    """The argv (after the container) that sets the user up as root (see
    :func:`build_setup_script`) and then runs ``shell`` (``bash -lc CMD``) as the user: one
    ``docker exec``, no second round trip."""
    uid = PROGRAM_UID
    drop = (f'if command -v setpriv >/dev/null 2>&1; then exec setpriv --reuid={uid} '
            f'--regid={uid} --clear-groups -- "$@"; else exec python3 -c '
            f'{shlex.quote(_DROP_PY.format(uid=uid))} "$@"; fi')
    script = (f"{{ {build_setup_script()}; }} >/dev/null 2>&1 || "
              "{ echo 'harness: the build user could not be set up' >&2; exit 125; }; " + drop)
    return ["sh", "-c", script, "sh", *shell]


def sweep_script() -> str:
    """Run as root before the build is committed: remove what the program user owns outside
    its workspace and home (``/tmp``, ``/var/tmp``, any world-writable folder), so nothing the
    build left there is in the image the judge runs in (a module in the folder the eval
    later puts on the judge's ``PYTHONPATH``, a ``pytest-of-root``...). Prints each path."""
    kept = ("/proc", "/sys", "/dev", WORKSPACE, PROGRAM_HOME, STASH)
    prune = " -o ".join(f"-path {p}" for p in kept)
    return (f"{end_program_script()}; "
            f"find / -xdev \\( {prune} \\) -prune -o -user {PROGRAM_UID} -print0 "
            "| xargs -0 -r sh -c 'for p; do printf \"%s\\0\" \"$p\"; rm -rf -- \"$p\"; done' sh")


_END_PY = ("import os, signal; os.setgroups([]); os.setgid({uid}); os.setuid({uid})\n"
           "for _ in range(10000):\n"
           "    try:\n        os.kill(-1, signal.SIGKILL)\n"
           "    except ProcessLookupError:\n        break")


def end_program_script() -> str:
    """Shell run as root: every process of the program user is ended (``kill(-1)`` sent as
    that user, until none is left), so nothing the build left running writes while its files
    are swept and checked."""
    uid = PROGRAM_UID
    return (f"if command -v setpriv >/dev/null 2>&1; then n=0; while [ $n -lt 10000 ] && "
            f"setpriv --reuid={uid} --regid={uid} --clear-groups kill -9 -1 2>/dev/null; "
            "do n=$((n + 1)); done; else "
            f"python3 -c {shlex.quote(_END_PY.format(uid=uid))} >/dev/null 2>&1; fi")


def judge_prefix() -> str:
    """Shell run as root before ``run.sh``: the workspace root and the tests are root's (the
    workspace stays world-writable and sticky, so the program can make files in its working
    folder but cannot rename or replace ``eval/``), the judge's Python leaves the working
    directory off ``sys.path``, and the results guard learns the program user."""
    ws = shlex.quote(WORKSPACE)
    return (f"{pytest_names_script()} && chown -h 0:0 {ws} && "
            f"{{ [ ! -d {ws}/eval ] || chown -R -h 0:0 {ws}/eval; }} && "
            f"chmod 1777 {ws} && {{ [ ! -d {ws}/eval ] || chmod -R go-w,a+rX {ws}/eval; }} && "
            f"export PYTHONSAFEPATH=1 {UID_ENV}={PROGRAM_UID} {HOME_ENV}={PROGRAM_HOME} && ")


# Names pytest reads in the workspace root, an ancestor of the tests: conftest.py and
# __init__.py (imported: a package layout climbs through the workspace root), and the ini
# files (read by every pytest process and xdist worker as it starts).
IMPORTED_NAMES = ("conftest.py", "__init__.py")
INI_NAMES = ("pytest.ini", ".pytest.ini")
CONFIG_NAMES = ("tox.ini", "setup.cfg")  # pytest's only with a pytest section
# pyproject.toml: an existing one becomes root's; an absent one is left absent (pytest 8.1
# and later take even an empty one as the rootdir when no other config is found, and a
# program may read one in its working folder): a program could still make one for a worker
# that starts after it ran. The note of issue 40 names this.
KEPT_ONLY = ("pyproject.toml",)


def pytest_names_script() -> str:
    """Shell run as root before the tests: each name pytest reads in the workspace root is
    root's, so the program (which may make files in its working folder) cannot plant one for
    a worker that starts later. conftest.py and __init__.py become empty root folders (pytest
    reads neither as a file); an existing ini or config file becomes root's, read-only; an
    absent one is held by an empty root folder (pytest.ini) or an empty root file (the
    others: pytest reads them only with a pytest section, a program as an empty config).
    Few processes: the shell's own tests and redirections, one rm, mkdir, chown, chmod."""
    ws = WORKSPACE
    folders = " ".join(f"{ws}/{n}" for n in IMPORTED_NAMES)
    lines = [f"own=; dirs='{folders}'"]
    for name in (*INI_NAMES, *CONFIG_NAMES, *KEPT_ONLY):
        path = f"{ws}/{name}"
        absent = (f"dirs=\"$dirs {path}\"" if name in INI_NAMES
                  else f": > {path}" if name in CONFIG_NAMES else ":")
        lines.append(f'if [ -e {path} ] || [ -L {path} ]; then own="$own {path}"; '
                     f"else {absent}; fi")
    lines.append(f"rm -rf -- {folders} && mkdir -m 0755 $dirs && "
                 '{ [ -z "$own" ] || { chown -h 0:0 $own && chmod go-w $own; }; }')
    return "{ " + "; ".join(lines) + "; }"  # one command of the prefix's && chain


def program_files_in_layer(upper: str, limit: int) -> list[str] | None:
    """The container paths the program user owns outside its workspace and home, from the
    container's upper layer on this host (only what the build changed): top-most ones only
    (a folder of its stands for what is in it). Names and ``lstat`` only, nothing followed.
    None when the layer cannot be read or holds more than ``limit`` such paths."""
    kept = (WORKSPACE, PROGRAM_HOME, STASH)
    found: list[str] = []
    try:
        for folder, dirs, files in os.walk(upper, onerror=_raise):
            rel = os.path.relpath(folder, upper)
            inside = "/" if rel == "." else "/" + rel
            for name in [*dirs, *files]:
                path = os.path.join(inside, name)
                owned = os.lstat(os.path.join(folder, name)).st_uid == PROGRAM_UID
                if path in kept or owned:
                    if name in dirs:
                        dirs.remove(name)  # not walked: kept, or removed whole
                    if owned and path not in kept:
                        found.append(path)
                    if len(found) > limit:
                        return None
    except OSError:
        return None
    return found


def _raise(exc: OSError) -> None:
    raise exc
