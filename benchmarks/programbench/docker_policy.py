"""The docker CLI ``programbench eval`` talks to: the real one, under our policy.

The official package runs every container through ``$PROGRAMBENCH_DOCKER_EXECUTABLE``
(read once, at import). We point it at a small generated ``sh`` script: the sub-commands the
policy decides on (``run``, ``create``, ``container``, ``network``, ``commit``, a global option,
the ``exec`` of ``eval/run.sh``) start this module; every other call goes to the real
``docker`` unchanged, with no Python started (``exec``: same process, same stdin, same exit
code). This module passes each call on unchanged too, except:

* ``run``/``create`` (also ``container run``/``container create``): ``--network none`` is
  added; a ``--network``/``--net`` of the caller's, or a global option before the
  sub-command, is refused (exit 125). The eval's compile and test containers have no
  network, so a ``compile.sh`` cannot fetch the original source and a test-time program
  cannot reach anything. Each container (and the committed image) carries the label
  ``harness.pb_eval=<call>``, so :func:`sweep` removes what a stopped CLI left behind.
  Created containers are logged with their id and image. A container of an image the eval
  did not build (the clean room ``compile.sh`` runs in) gets a stat snapshot of the paths
  that steer the tests (:data:`PYTHON_ROOTS`, the login files), taken before the CLI learns
  its id, so before anything of the submission is in it.
* the ``exec`` that runs a branch's ``eval/run.sh``: its pytest also loads
  :mod:`~benchmarks.programbench.results_guard_plugin` (copied in under a random name), which
  ends every process the program under test left behind before the JUnit XML is written.
* ``network``: refused (nothing may connect a container to a network).
* ``commit`` (the eval commits the compile container once, after ``compile.sh``, which runs
  as root): first the files a build could have written to steer the tests' pytest are
  deleted in that container (the same root rules as
  :mod:`benchmarks.programbench.scorer_guard`, applied to ``/workspace`` and ``/``), so
  generating a ``conftest.py`` at build time gains nothing. Then the container is paused, and
  stays paused until ``docker commit`` has made the image (unpaused on every path): a process
  the build left running cannot write between the check and the commit. While it is paused,
  the build's changes are read from its upper layer on this host
  (:mod:`~benchmarks.programbench.layer_changes`), else from the engine's API (JSON, so a
  name with a newline is one path), else ``docker diff``. A build that changed Python's own
  files, pytest or its plugins, added a ``.pth``, ``sitecustomize``, a module ahead of one the
  scorer imports (the standard library's folders, the user site and /usr/local's
  dist-packages come before Debian's /usr/lib/python3/dist-packages), a ``pytest11`` entry
  point, a file a login shell reads, or made a workspace override again after its removal,
  is refused (exit 125, :data:`BUILD_TAMPER_MARKER`: the eval errors, the agent's failure).
  A running container that cannot be paused is refused too, without that marker (the
  engine's doing).

Each decision is appended to a JSON-lines log that the caller reads back as evidence, with
the seconds the policy spent on it (``took_s``).

This module is the policy's entry point (the argv rewrite, the exec and commit cases, the
wrapper and the sweep); the build's check is :mod:`~benchmarks.programbench.docker_policy_checks`'s
and the rules it applies :mod:`~benchmarks.programbench.docker_policy_rules`'s, their names
importable from here too.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from benchmarks.programbench.docker_policy_checks import (  # noqa: F401  (re-exported)
    DIFF_FAILED,
    DIFF_MALFORMED,
    DIFF_REFUSALS,
    DIFF_TIMED_OUT,
    DIFF_TOO_MANY,
    GO_TYPE_BITS,
    PAUSE_FAILED,
    _api_changes,
    _api_client,
    _api_look,
    _build_view,
    _checked_here,
    _container_running,
    _diff_changes,
    _exec_in,
    _in_workspace,
    _layers,
    _shown,
    _site_names,
    _text_changes,
    _unknown,
    build_changes,
    build_overrides,
    build_tampering,
    check_build,
    tampered_paths,
)
from benchmarks.programbench.docker_policy_rules import (  # noqa: F401  (re-exported)
    API_KINDS,
    BUILD_TAMPER_MARKER,
    DIFF_KINDS,
    IMPORT_ROOTS,
    LAST_SITE,
    LOGIN_FILES,
    MAX_DIFF_CHECKED,
    MODULE_NAME,
    PATH_FOLDERS,
    PYTHON_ROOTS,
    SITE_ENTRY,
    STDLIB_ENTRY,
    STEERING_DIRS,
    STEERING_NAMES,
    SYS_PATH_ZIP,
    TAMPER_SCOPE,
    TEST_COMMAND_PREFIXES,
    TEST_COMMANDS,
    WORKSPACE,
    WORKSPACE_DEPTH,
    _config_edited,
    _ensure_site,
    _full,
    _on_the_way,
    _shadows,
    _site_shadow_names,
    _steers,
    module_name,
    workspace_override,
)
from benchmarks.programbench.program_user import (
    PROGRAM_UID,
    build_command,
    build_exec_flags,
    end_program_script,
    judge_prefix,
    program_files_in_layer,
    sweep_script,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from benchmarks.programbench.docker_policy_checks import Look  # noqa: F401  (re-exported)

WRAPPER_NAME = "docker"
LOG_NAME = "docker_policy.jsonl"
REFUSED_RC = 125
LABEL_KEY = "harness.pb_eval"  # value: the policy folder's name, one per eval call
NETWORK_FLAGS = ("--network", "--net")
CREATE_COMMANDS = ("run", "create")
REPO_ROOT = Path(__file__).resolve().parents[2]


class PolicyRefused(Exception):
    pass


def rewrite(args: list[str], label: str | None = None) -> list[str]:
    """The argv (after ``docker``) the real CLI gets; raises :class:`PolicyRefused`."""
    if not args:
        return args
    if args[0].startswith("-"):
        raise PolicyRefused(f"global docker options are not allowed: {args[0]}")
    head = 2 if args[0] == "container" and len(args) > 1 else 1
    sub = args[head - 1]
    if sub == "network":
        raise PolicyRefused("docker network commands are not allowed")
    if sub not in CREATE_COMMANDS:
        return args
    for arg in args[head:]:
        if arg in NETWORK_FLAGS or arg.startswith(tuple(f + "=" for f in NETWORK_FLAGS)):
            raise PolicyRefused(f"a container network may not be chosen: {arg}")
    tag = ["--label", f"{LABEL_KEY}={label}"] if label else []
    # no setuid bit works in the eval's containers: the build and the program, which run as
    # the program user (see program_user), cannot become root through one the image has
    return [*args[:head], "--network", "none", "--security-opt", "no-new-privileges", *tag,
            *args[head:]]


VALUE_FLAGS = frozenset({
    "--name", "-w", "--workdir", "--cpus", "-e", "--env", "--network", "-u", "--user", "-v",
    "--volume", "-m", "--memory", "-l", "--label", "--entrypoint", "--mount", "--cap-add",
    "--cap-drop", "--pids-limit", "--env-file", "--hostname", "-h", "--platform",
    "--security-opt",
})


def image_of(args: list[str]) -> str:
    """The image of a ``run``/``create`` argv (the first positional after the options)."""
    rest = args[2:] if args[:1] == ["container"] else args[1:]
    skip = False
    for arg in rest:
        if skip:
            skip = False
        elif arg in VALUE_FLAGS:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return ""


def _log(path: str | None, entry: dict[str, object]) -> None:
    if not path:
        return
    line = json.dumps({"ts": round(time.time(), 3), **entry}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


RUN_TESTS_MARKER = "./eval/run.sh"
BUILD_MARKER = "./compile.sh"
PLUGIN_SOURCE = Path(__file__).with_name("results_guard_plugin.py")
# Bytes of each stream of the two eval steps that run the submission's code (compile.sh, and
# run.sh's tests of the program) that leave the container: the rest is counted and dropped in
# the container, so a flood of output never reaches the official CLI (which holds each
# step's output in memory and writes it into eval.json). The verdict never rides on it: the
# results come by docker cp.
STEP_OUTPUT_CAP = 1 << 20


def _cut(stream: str) -> str:
    return (f"{{ head -c {STEP_OUTPUT_CAP}; n=$(wc -c); [ \"$n\" -eq 0 ] || "
            f"printf '\\n[harness: %s more bytes of {stream} cut]\\n' \"$n\"; }}")


# ``bash -lc PREFIX + command + SUFFIX``: the command's stdout and stderr each pass through
# _cut, apart; pipefail (outside the command, whose own pipelines keep bash's default) keeps
# the command's exit status.
CAP_PREFIX = "set -o pipefail; { { set +o pipefail\n"
CAP_SUFFIX = f"\n}} 2>&1 1>&3 3>&- | {_cut('stderr')} >&2; }} 3>&1 | {_cut('stdout')}"


def capped(command: str) -> str:
    """A ``bash -c`` command whose output leaves the container cut at STEP_OUTPUT_CAP."""
    return CAP_PREFIX + command + CAP_SUFFIX


def _exec_target(args: list[str], marker: str = RUN_TESTS_MARKER) -> tuple[int, str] | None:
    """``(index, container)`` of an ``exec`` argv that runs the eval's ``run.sh`` (or, with
    ``marker``, another step: :data:`BUILD_MARKER`)."""
    if args[:1] != ["exec"] or marker not in args[-1]:
        return None
    skip = False
    for i, arg in enumerate(args[1:], start=1):
        if skip:
            skip = False
        elif arg in VALUE_FLAGS:
            skip = True
        elif not arg.startswith("-"):
            return i, arg
    return None


# The judge's pytest loads no plugin by entry point (PYTEST_DISABLE_PLUGIN_AUTOLOAD): a
# ``*.dist-info`` in the submission, found through the working directory at the head of
# sys.path, would be one. The plugins the official eval uses are loaded by the results guard
# instead (its ``pytest_plugins``: those of them the test image has).
NO_PLUGIN_AUTOLOAD = "export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 && "


ACCOUNT_KEY_NAME = "account.key"


def _feed_account_key(args: list[str], key_file: Path) -> list[str]:
    """The test-run exec reads the eval call's account key on its stdin (``exec -i``, fd 0
    this file): the results guard takes it at import, before a test runs the program, so it
    is in no command line, environment or file the program could read."""
    try:
        fd = os.open(key_file, os.O_RDONLY)
    except OSError:
        return args  # no key: the account is then not accepted (see official_eval)
    os.dup2(fd, 0)
    os.close(fd)
    target = _exec_target(args)
    flags = args[1:target[0]] if target is not None else []
    return args if "-i" in flags or "--interactive" in flags else [args[0], "-i", *args[1:]]


def guard_results(docker: str, args: list[str]) -> list[str]:
    """The test-run ``exec`` with :mod:`results_guard_plugin` loaded into its pytest: the same
    shell writes the plugin (under a random name, in a fresh ``0700`` folder) just before
    ``run.sh`` starts, so no second ``docker exec`` is needed."""
    if _exec_target(args) is None:
        return args
    try:
        source = PLUGIN_SOURCE.read_text()
    except OSError as exc:
        raise PolicyRefused(f"cannot install the results guard: {exc}") from exc
    nonce = secrets.token_hex(8)
    folder, module = f"/tmp/.hx-{nonce}", f"hx_results_guard_{nonce}"
    prefix = (f"mkdir -m 700 {folder} && printf '%s' {shlex.quote(source)} > "
              f"{folder}/{module}.py && "
              f'export PYTHONPATH="{folder}${{PYTHONPATH:+:$PYTHONPATH}}" && '
              f"{NO_PLUGIN_AUTOLOAD}{judge_prefix()}"
              f'export PYTEST_ADDOPTS="${{PYTEST_ADDOPTS:-}} -p {module}" && ')
    return [*args[:-1], capped(prefix + args[-1])]


def build_as_program_user(args: list[str], log: str | None) -> list[str]:
    """The build's ``exec`` (``bash -lc ... ./compile.sh``) as the program user, its output
    capped; the same exec first makes the user, its home and the workspace its own (as
    root)."""
    if len(args) < 4 or args[-2] != "-lc" or _exec_target(args, BUILD_MARKER) is None:
        return args
    _log(log, {"op": "exec", "build_user": PROGRAM_UID})
    shell = [args[-3], "-lc", capped(args[-1])]
    return [args[0], *build_exec_flags(), *args[1:-3], *build_command(shell)]


SWEEP_LIMIT = 5000  # paths removed by name; more, and the container's own find does it


def _program_files(docker: str, container: str, log: str | None) -> list[str]:
    """What the program user owns outside its workspace and home (see
    :func:`~benchmarks.programbench.program_user.sweep_script`): listed from the container's
    upper layer on this host (only what the build changed, names and ``lstat``), else by a
    ``find`` in the container, which then removes them itself (returns [] for the caller)."""
    layers = _layers(docker, container)
    found = program_files_in_layer(layers[0], SWEEP_LIMIT) if layers else None
    if found is None:
        out = _exec_in(docker, container, ["sh", "-c", sweep_script()], 300)
        gone = [p for p in out.decode(errors="surrogateescape").split("\0") if p]
        _log(log, {"op": "sweep", "swept": [_shown(p) for p in gone][:50], "by": "find"})
        return []
    _log(log, {"op": "sweep", "swept": [_shown(p) for p in found][:50], "by": "layer"})
    return found


def _refuse(log: str | None, reason: str) -> NoReturn:
    _log(log, {"op": "commit", "refused": reason})
    print(reason, file=sys.stderr)
    sys.exit(REFUSED_RC)


def _checked_commit(docker: str, new: list[str], container: str, layers: tuple[str, list[str]]
                    | None, removed: list[str], log: str | None, started: float) -> int:
    """Check the build (``container`` is paused, or not running) and commit it: the exit
    status of ``docker commit``, or exit :data:`REFUSED_RC` when the build steers."""
    tampered, source = check_build(docker, container, layers)
    if tampered:
        _refuse(log, f"{BUILD_TAMPER_MARKER}: {', '.join(_shown(p) for p in tampered[:20])}")
    positional = [a for a in new[1:] if not a.startswith("-")]
    _log(log, {"op": "commit", "image": positional[1] if len(positional) > 1 else "",
               "build_files_removed": [_shown(p) for p in removed], "changes_from": source})
    if log:  # the committed image carries the call's label too (see sweep)
        new = [new[0], "--change", f"LABEL {LABEL_KEY}={Path(log).parent.name}", *new[1:]]
    _log(log, {"op": "commit_checked", "took_s": round(time.monotonic() - started, 3)})
    # docker commit leaves a paused container paused (it pauses only a running one)
    proc = subprocess.run([docker, *new], stdin=subprocess.DEVNULL, capture_output=True,
                          check=False)
    sys.stdout.buffer.write(proc.stdout)
    sys.stderr.buffer.write(proc.stderr)
    return proc.returncode


def _commit(docker: str, new: list[str], log: str | None, started: float) -> NoReturn:
    """Remove the build's overrides, then, the container paused from its check until the
    commit is made (a process the build left running writes nothing in between), refuse a
    build that steers the tests, or commit it. Exits with the commit's status."""
    from benchmarks.programbench.layer_changes import PauseFailed, paused

    positional = [a for a in new[1:] if not a.startswith("-")]
    container = positional[0] if positional else ""
    if not container:
        os.execv(docker, [docker, *new])
    # while it runs: docker exec (the removal) cannot run in a paused container; anything
    # made again after it is an override the check below finds. The listing's exec first
    # ends every process of the program user, so nothing of the build writes after it.
    removed = build_overrides(docker, container, prelude=end_program_script())
    swept = _program_files(docker, container, log)
    paths = [p for p in (*removed, *swept) if p.startswith("/")]
    if paths:
        subprocess.run([docker, "exec", "-u", "0", container, "rm", "-rf", "--", *paths],
                       capture_output=True, timeout=300, check=False)
    try:
        with paused(docker, container) as layers:
            status = _checked_commit(docker, new, container, layers, removed, log, started)
    except PauseFailed:
        if _container_running(docker, container) is not False:
            # an engine without a freezer: no check here could stand for what is committed
            _refuse(log, f"docker policy: {PAUSE_FAILED[1:-1]}")
        # not running: no process of the build is left to write
        status = _checked_commit(docker, new, container, _layers(docker, container), removed,
                                 log, started)
    sys.exit(status)


def _or_refuse(log: str | None, make: Callable[[], list[str]]) -> list[str]:
    """``make()``'s argv, or the exec refused (logged, exit :data:`REFUSED_RC`)."""
    try:
        return make()
    except PolicyRefused as exc:
        _log(log, {"op": "exec", "refused": str(exc)})
        print(f"docker policy: refused: {exc}", file=sys.stderr)
        sys.exit(REFUSED_RC)


def main(argv: list[str]) -> NoReturn:
    """``docker_policy --docker REAL [--log FILE] -- ARGS...``"""
    started = time.monotonic()
    sep = argv.index("--") if "--" in argv else len(argv)
    opts, args = argv[:sep], argv[sep + 1 :]
    docker = opts[opts.index("--docker") + 1]
    log = opts[opts.index("--log") + 1] if "--log" in opts else None
    try:
        new = rewrite(args, Path(log).parent.name if log else None)
    except PolicyRefused as exc:
        _log(log, {"op": args[0] if args else "", "refused": str(exc)})
        print(f"docker policy: refused: {exc}", file=sys.stderr)
        sys.exit(REFUSED_RC)
    sub = new[1] if new[:1] == ["container"] and len(new) > 1 else (new[0] if new else "")
    if sub in CREATE_COMMANDS:
        proc = subprocess.run([docker, *new], stdin=subprocess.DEVNULL, capture_output=True,
                              check=False)
        sys.stdout.buffer.write(proc.stdout)
        sys.stderr.buffer.write(proc.stderr)
        _log(log, {"op": sub, "network": "none", "image": image_of(new),
                   "id": proc.stdout.decode(errors="replace").strip(),
                   "took_s": round(time.monotonic() - started, 3)})
        sys.exit(proc.returncode)
    elif _exec_target(new) is not None:
        new = _or_refuse(log, lambda: guard_results(docker, new))
        _log(log, {"op": "exec", "results_guard": True,
                   "took_s": round(time.monotonic() - started, 3)})
        if log is not None:
            new = _feed_account_key(new, Path(log).with_name(ACCOUNT_KEY_NAME))
    elif _exec_target(new, BUILD_MARKER) is not None:
        new = build_as_program_user(new, log)
    elif sub == "commit" and len(new) >= 2:
        _commit(docker, new, log, started)
    os.execv(docker, [docker, *new])


def sweep(docker: str, label: str, env: dict[str, str] | None = None) -> int:
    """Remove the containers and images of one eval call left behind (a CLI stopped between
    ``docker run`` and learning the id cannot remove them itself). Returns how many.

    ``env``: the environment of the ``docker`` calls (the eval's engine; default: this
    process's)."""
    gone = 0
    selector = ["--filter", f"label={LABEL_KEY}={label}"]
    listings: list[tuple[subprocess.Popen[str], list[str]]] = []
    for listing, remove in ((["ps", "-aq"], ["rm", "-f"]), (["images", "-q"], ["rmi", "-f"])):
        try:  # both listings at once: most calls find nothing
            listings.append((subprocess.Popen([docker, *listing, *selector], text=True,
                                              stdout=subprocess.PIPE, env=env,
                                              stderr=subprocess.DEVNULL), remove))
        except OSError:
            continue
    for proc, remove in listings:  # containers first: an image in use cannot go
        try:
            ids = set(proc.communicate(timeout=60)[0].split())
            if ids:
                subprocess.run([docker, *remove, *sorted(ids)], capture_output=True,
                               timeout=300, check=False, env=env)
                gone += len(ids)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
            continue
    return gone


# The sub-commands the policy decides on; every other call goes straight to the real docker.
POLICY_CASES = "run|create|commit|container|network|-*"


def install(folder: Path, *, docker: str | None = None) -> tuple[Path, Path]:
    """Write the wrapper script (and an empty log) into ``folder``: ``(wrapper, log)``.

    The wrapper is ``sh``: a call the policy passes through unchanged never starts Python
    (``exec`` of the real docker); the others start this module with ``-S`` (no site
    packages to scan: it needs the standard library only, until a ``commit``)."""
    real = docker or shutil.which("docker")
    if not real:
        raise FileNotFoundError("no docker CLI on PATH for the eval's docker policy")
    folder.mkdir(parents=True, exist_ok=True)
    wrapper, log = folder / WRAPPER_NAME, folder / LOG_NAME
    log.write_text("")
    key = folder / ACCOUNT_KEY_NAME  # on this host only: see _feed_account_key
    key.write_text(secrets.token_hex(16) + "\n")
    key.chmod(0o600)
    real_q = shlex.quote(str(Path(real).resolve()))
    argv = [sys.executable, "-S", "-m", "benchmarks.programbench.docker_policy", "--docker",
            str(Path(real).resolve()), "--log", str(log), "--"]
    wrapper.write_text(
        "#!/bin/sh\n"
        f'case "${{1-}}" in\n'
        f"  {POLICY_CASES}) ;;\n"
        # the two steps that run the submission's code: the build (compile.sh, as the
        # program user, its output capped) and the tests (run.sh, under the results guard)
        '  exec) for last; do :; done\n'
        f'        case "$last" in *{RUN_TESTS_MARKER}*|*{BUILD_MARKER}*) ;; *)\n'
        f'          exec {real_q} "$@" ;; esac ;;\n'
        f'  *) exec {real_q} "$@" ;;\n'
        "esac\n"
        f"PYTHONPATH={shlex.quote(str(REPO_ROOT))}${{PYTHONPATH:+:$PYTHONPATH}} "
        f"exec {' '.join(shlex.quote(a) for a in argv)} \"$@\"\n"
    )
    wrapper.chmod(0o755)
    return wrapper, log


if __name__ == "__main__":
    main(sys.argv[1:])
