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
  as root): the same snapshot is taken again and compared (type, size, mode, owner, mtime and
  ctime, which no process in the container can set back), which lists what ``docker diff``
  would list under those paths at a fraction of its cost (``docker diff`` walks the whole
  image on a naive-diff storage driver); without a first snapshot, ``docker diff`` itself is
  read. A build that changed Python's own files, pytest or its plugins, added a ``.pth``,
  ``sitecustomize``, a ``pytest11`` entry point, or a file a login shell reads, is refused
  (exit 125, :data:`BUILD_TAMPER_MARKER`: the eval errors, the agent's failure). Otherwise the
  files a build could have written to steer the tests' pytest are deleted in that container
  (the same root rules as :mod:`benchmarks.programbench.scorer_guard`, applied to
  ``/workspace`` and ``/``), so generating a ``conftest.py`` at build time gains nothing.

Each decision is appended to a JSON-lines log that the caller reads back as evidence, with
the seconds the policy spent on it (``took_s``).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

WRAPPER_NAME = "docker"
LOG_NAME = "docker_policy.jsonl"
REFUSED_RC = 125
LABEL_KEY = "harness.pb_eval"  # value: the policy folder's name, one per eval call
NETWORK_FLAGS = ("--network", "--net")
CREATE_COMMANDS = ("run", "create")
REPO_ROOT = Path(__file__).resolve().parents[2]
MAX_CONFIG_BYTES = 1 << 20


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
    return [*args[:head], "--network", "none", *tag, *args[head:]]


VALUE_FLAGS = frozenset({
    "--name", "-w", "--workdir", "--cpus", "-e", "--env", "--network", "-u", "--user", "-v",
    "--volume", "-m", "--memory", "-l", "--label", "--entrypoint", "--mount", "--cap-add",
    "--cap-drop", "--pids-limit", "--env-file", "--hostname", "-h", "--platform",
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


def _exec_in(docker: str, container: str, argv: list[str], timeout: float = 120) -> bytes:
    try:
        proc = subprocess.run([docker, "exec", "-u", "0", container, *argv],
                              capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return b""
    return proc.stdout if proc.returncode == 0 else b""


def build_overrides(docker: str, container: str) -> list[str]:
    """Paths in ``container`` (absolute) that would steer the tests' pytest."""
    from benchmarks.programbench.scorer_rules import (
        EDITED_CONFIGS,
        ROOT_PYTEST_FILES,
        edit_config,
        root_reason,
    )

    # one exec: the workspace's top two levels, then ini files at /, then the two editable
    # configs when they are not regular files (links, FIFOs...), NUL-separated sections
    tops = " ".join(f"/{n}" for n in sorted(ROOT_PYTEST_FILES))
    configs = " ".join(f"/workspace/{n}" for n in EDITED_CONFIGS)
    script = (
        "find /workspace -mindepth 1 -maxdepth 2 -print0; printf '\\0--\\0'; "
        f"for p in {tops}; do if [ -e $p ] || [ -L $p ]; then printf '%s\\0' $p; fi; done; "
        "printf '\\0--\\0'; "
        f"for p in {configs}; do if [ -L $p ] || {{ [ -e $p ] && [ ! -f $p ]; }}; then "
        "printf '%s\\0' $p; fi; done"
    )
    out = _exec_in(docker, container, ["sh", "-c", script])
    sections = out.split(b"\0--\0")
    if len(sections) != 3:
        return ["(the build's workspace could not be listed)"]
    listing, at_root, odd = ([x.decode(errors="surrogateescape") for x in sec.split(b"\0") if x]
                             for sec in sections)
    found: list[str] = [*at_root, *odd]
    for path in listing:
        rel = path.removeprefix("/workspace/")
        parts = rel.split("/")
        if not rel.startswith("/") and root_reason(parts) is not None and (
                len(parts) == 1 or parts[0] != "eval"):
            found.append(path)
    for name in EDITED_CONFIGS:
        path = f"/workspace/{name}"
        if path in found or path not in listing:
            continue
        data = _exec_in(docker, container, ["head", "-c", str(MAX_CONFIG_BYTES + 1), path], 60)
        if sys.flags.no_site and "site" not in sys.modules:  # started with -S: a setup.cfg
            import site  # is read with iniconfig, from the site packages

            site.main()
        if len(data) > MAX_CONFIG_BYTES or edit_config(name, data) != data:
            found.append(path)
    return sorted(set(found))


BUILD_TAMPER_MARKER = "docker policy: the build changed what the tests' pytest runs on"
# where the tests' Python imports from (a link here, or one on the way, steers)
IMPORT_ROOTS = ("/usr/lib/python3", "/usr/local/lib/python3", "/root/.local/lib/python",
                "/etc/python3")
PYTHON_ROOTS = (*IMPORT_ROOTS, "/usr/bin/python", "/usr/local/bin/python", "/usr/bin/pytest",
                "/usr/local/bin/pytest", "/usr/bin/py.test")
# the tests' PATH (docker exec resolves ``bash`` with it, ``bash -lc`` gets it from
# /etc/profile): a command the eval's test exec or run.sh runs by name, planted ahead of the
# image's or changed in place, runs instead of it
PATH_FOLDERS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
TEST_COMMAND_PREFIXES = ("python", "pytest", "py.test", "pip")
TEST_COMMANDS = frozenset({"bash", "sh", "dash", "env", "dirname", "chmod", "rm", "mv", "cp",
                           "sed", "grep", "find", "sha256sum", "test", "[", "mkdir", "tar",
                           "cat", "timeout"})
STEERING_NAMES = ("sitecustomize.py", "usercustomize.py")
STEERING_DIRS = ("/_pytest/", "/pytest/", "/pluggy/", "/xdist/", "/iniconfig/", "/junitparser/")
LOGIN_FILES = frozenset({"/etc/profile", "/etc/bash.bashrc", "/etc/bashrc", "/etc/environment",
                         "/root/.profile", "/root/.bash_profile", "/root/.bash_login",
                         "/root/.bashrc", "/root/.pam_environment"})
MAX_DIFF_CHECKED = 5000


def _on_the_way(path: str) -> bool:
    """A folder some path of :data:`TAMPER_SCOPE` is below (``/root/.local``, ``/usr``)."""
    return any(s.startswith(path.rstrip("/") + "/") for s in TAMPER_SCOPE)


def _steers(kind: str, path: str) -> bool | None:
    """True: this build change steers the tests' Python/pytest or their login shell; None:
    only if it is a regular file (a changed existing module) or, on the way to the scope, a
    link or a non-folder; False: harmless. ``kind`` is ``docker diff``'s, or ``L`` (a link, or
    a non-folder on the way: :data:`~benchmarks.programbench.layer_changes.LINK`)."""
    if path in LOGIN_FILES or path.startswith("/etc/profile.d/"):
        return True
    folder, _, name = path.rpartition("/")
    if folder in PATH_FOLDERS:
        return name in TEST_COMMANDS or name.startswith(TEST_COMMAND_PREFIXES)
    if kind == "L" and (path.startswith(IMPORT_ROOTS) or path == "/etc/profile.d"):
        return True
    if _on_the_way(path):  # /usr, /root/.local: a link there moves what is below
        return True if kind in ("D", "L") else None
    if not path.startswith(PYTHON_ROOTS):
        return False
    name = path.rsplit("/", 1)[-1]
    if kind == "D" or name.endswith(".pth") or name in STEERING_NAMES:
        return True
    if name.endswith(".pyc") and path.startswith("/usr/lib/python3"):
        return True  # a cached module the system's own sources would load
    if any(d in path + "/" for d in STEERING_DIRS) or name.startswith(("pytest", "_pytest")):
        return True
    if name == "entry_points.txt" or kind == "C":
        return None  # a [pytest11] entry point autoloads a plugin; a changed module steers
    return False


TAMPER_SCOPE = (*PYTHON_ROOTS, *(f"{f}/" for f in PATH_FOLDERS), *sorted(LOGIN_FILES),
                "/etc/profile.d")
DIFF_KINDS = ("A", "C", "D")


def _shown(path: str) -> str:
    """``path`` as UTF-8 text for the log and the evidence: a byte that is not UTF-8 (a
    surrogate once decoded) is written as ``\\xff``, which JSON and pydantic accept."""
    try:
        return os.fsencode(path).decode("utf-8", "backslashreplace")
    except UnicodeError:
        return path.encode("utf-8", "backslashreplace").decode("utf-8")


def build_changes(docker: str, container: str) -> tuple[list[tuple[str, str]], str]:
    """``([(kind, path)], source)``: what the build changed under :data:`TAMPER_SCOPE`, from
    the container's upper layer when this host can read it (``layer``), else ``docker diff``
    (``docker_diff``, every path; it walks the whole image on a naive-diff driver)."""
    from benchmarks.programbench.layer_changes import Unavailable, container_changes

    try:
        return container_changes(docker, container, TAMPER_SCOPE), "layer"
    except (Unavailable, OSError):
        pass
    try:
        diff = subprocess.run([docker, "diff", container], capture_output=True, timeout=300,
                              check=False).stdout.decode(errors="replace").split("\n")
    except subprocess.TimeoutExpired:
        return [], DIFF_TIMED_OUT
    if diff and diff[-1] == "":
        diff.pop()
    pairs = [line.partition(" ") for line in diff]
    # a path is printed unescaped: a name with a newline splits into a line that is not
    # "<kind> /<path>", so such a diff cannot be read, never partly
    if any(kind not in DIFF_KINDS or sep != " " or not path.startswith("/")
           for kind, sep, path in pairs):
        return [], DIFF_MALFORMED
    kept = [(kind, path) for kind, _, path in pairs
            if path.startswith(TAMPER_SCOPE) or _on_the_way(path)]
    if len(kept) > MAX_DIFF_CHECKED:  # never cut: what is past a cap goes unchecked
        return [], DIFF_TOO_MANY
    return kept, "docker_diff"


DIFF_TIMED_OUT = "(docker diff timed out)"
DIFF_MALFORMED = "(docker diff has a line that is not a change: a name with a newline?)"
DIFF_TOO_MANY = f"(docker diff lists more than {MAX_DIFF_CHECKED} changes where Python looks)"
DIFF_REFUSALS = (DIFF_TIMED_OUT, DIFF_MALFORMED, DIFF_TOO_MANY)


def build_tampering(docker: str, container: str) -> list[str]:
    """Changes the build made outside ``/workspace`` that would steer the tests: Python's own
    files, pytest and its plugins, ``.pth``/``sitecustomize``, plugin entry points, the files
    a login shell reads (the eval runs its tests under ``bash -lc``)."""
    found, source = build_changes(docker, container)
    if source in DIFF_REFUSALS:
        return [source]
    return tampered_paths(docker, container, found)


def tampered_paths(docker: str, container: str, found: list[tuple[str, str]]) -> list[str]:
    """The paths of ``found`` (``docker diff`` pairs) that steer the tests."""
    flagged: list[str] = []
    maybe: list[str] = []
    for kind, path in found:
        verdict = _steers(kind, path)
        if verdict:
            flagged.append(path)
        elif verdict is None:
            maybe.append(path)
    if len(maybe) > MAX_DIFF_CHECKED:
        flagged.append(f"({len(maybe)} changed files where Python looks, too many to check)")
    elif maybe:
        # regular files and links (a "C" directory is just the parent of an added file); an
        # entry_points.txt counts when it declares a pytest plugin. The script ends with
        # status 0: a failed exec (a container that is gone or paused) flags them all.
        script = ('for p in "$@"; do if [ -L "$p" ]; then printf "%s\\0" "$p"; '
                  'elif [ -f "$p" ]; then case "$p" in '
                  '*/entry_points.txt) if grep -q pytest11 "$p"; then printf "%s\\0" "$p"; '
                  'fi;; *) printf "%s\\0" "$p";; esac; '
                  'elif [ -e "$p" ] && [ ! -d "$p" ]; then printf "%s\\0" "$p"; fi; done; '
                  'exit 0')
        try:
            proc = subprocess.run([docker, "exec", "-u", "0", container, "sh", "-c", script,
                                   "_", *maybe], capture_output=True, timeout=120, check=False)
            out: bytes | None = proc.stdout if proc.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired):
            out = None
        if out is None:
            flagged += maybe
        else:
            flagged += [os.fsdecode(p) for p in out.split(b"\0") if p]
    return sorted(set(flagged))


RUN_TESTS_MARKER = "./eval/run.sh"
PLUGIN_SOURCE = Path(__file__).with_name("results_guard_plugin.py")


def _exec_target(args: list[str]) -> tuple[int, str] | None:
    """``(index, container)`` of an ``exec`` argv that runs the eval's ``run.sh``."""
    if args[:1] != ["exec"] or RUN_TESTS_MARKER not in args[-1]:
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


def guard_results(docker: str, args: list[str]) -> list[str]:
    """The test-run ``exec`` with :mod:`results_guard_plugin` loaded into its pytest: the same
    shell writes the plugin (under a random name, in a fresh ``0700`` folder) just before
    ``run.sh`` starts, so no second ``docker exec`` is needed."""
    import secrets

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
              f'export PYTEST_ADDOPTS="${{PYTEST_ADDOPTS:-}} -p {module}" && ')
    return [*args[:-1], prefix + args[-1]]


def _commit(docker: str, new: list[str], log: str | None) -> list[str]:
    """Refuse a build that steers the tests (exit), else remove its overrides: the argv."""
    positional = [a for a in new[1:] if not a.startswith("-")]
    container = positional[0] if positional else ""
    tampered: list[str] = []
    source = ""
    if container:
        found, source = build_changes(docker, container)
        tampered = ([source] if source in DIFF_REFUSALS
                    else tampered_paths(docker, container, found))
    if tampered:
        reason = f"{BUILD_TAMPER_MARKER}: {', '.join(_shown(p) for p in tampered[:20])}"
        _log(log, {"op": "commit", "refused": reason})
        print(reason, file=sys.stderr)
        sys.exit(REFUSED_RC)
    removed = build_overrides(docker, container) if container else []
    paths = [p for p in removed if p.startswith("/")]
    if paths:
        subprocess.run([docker, "exec", "-u", "0", container, "rm", "-rf", "--", *paths],
                       capture_output=True, timeout=300, check=False)
    _log(log, {"op": "commit", "image": positional[1] if len(positional) > 1 else "",
               "build_files_removed": [_shown(p) for p in removed], "changes_from": source})
    if log:  # the committed image carries the call's label too (see sweep)
        new = [new[0], "--change", f"LABEL {LABEL_KEY}={Path(log).parent.name}", *new[1:]]
    return new


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
        try:
            new = guard_results(docker, new)
        except PolicyRefused as exc:
            _log(log, {"op": "exec", "refused": str(exc)})
            print(f"docker policy: refused: {exc}", file=sys.stderr)
            sys.exit(REFUSED_RC)
        _log(log, {"op": "exec", "results_guard": True,
                   "took_s": round(time.monotonic() - started, 3)})
    elif sub == "commit" and len(new) >= 2:
        new = _commit(docker, new, log)
        _log(log, {"op": "commit_checked", "took_s": round(time.monotonic() - started, 3)})
    os.execv(docker, [docker, *new])


def sweep(docker: str, label: str) -> int:
    """Remove the containers and images of one eval call left behind (a CLI stopped between
    ``docker run`` and learning the id cannot remove them itself). Returns how many."""
    gone = 0
    selector = ["--filter", f"label={LABEL_KEY}={label}"]
    listings: list[tuple[subprocess.Popen[str], list[str]]] = []
    for listing, remove in ((["ps", "-aq"], ["rm", "-f"]), (["images", "-q"], ["rmi", "-f"])):
        try:  # both listings at once: most calls find nothing
            listings.append((subprocess.Popen([docker, *listing, *selector], text=True,
                                              stdout=subprocess.PIPE,
                                              stderr=subprocess.DEVNULL), remove))
        except OSError:
            continue
    for proc, remove in listings:  # containers first: an image in use cannot go
        try:
            ids = set(proc.communicate(timeout=60)[0].split())
            if ids:
                subprocess.run([docker, *remove, *sorted(ids)], capture_output=True,
                               timeout=300, check=False)
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
    real_q = shlex.quote(str(Path(real).resolve()))
    argv = [sys.executable, "-S", "-m", "benchmarks.programbench.docker_policy", "--docker",
            str(Path(real).resolve()), "--log", str(log), "--"]
    wrapper.write_text(
        "#!/bin/sh\n"
        f'case "${{1-}}" in\n'
        f"  {POLICY_CASES}) ;;\n"
        '  exec) for last; do :; done\n'
        f'        case "$last" in *{RUN_TESTS_MARKER}*) ;; *) exec {real_q} "$@" ;; esac ;;\n'
        f'  *) exec {real_q} "$@" ;;\n'
        "esac\n"
        f"PYTHONPATH={shlex.quote(str(REPO_ROOT))}${{PYTHONPATH:+:$PYTHONPATH}} "
        f"exec {' '.join(shlex.quote(a) for a in argv)} \"$@\"\n"
    )
    wrapper.chmod(0o755)
    return wrapper, log


if __name__ == "__main__":
    main(sys.argv[1:])
