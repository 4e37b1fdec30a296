"""Protected executables: a program the agent may run but cannot read, dump, move or link.

Design (kernel-enforced; tests: tests/sandbox/test_sandbox_protected.py and
tests/security/test_reference_*.py)::

    /.harness-protected/            uid 1999, mode 0700: nobody else can enter it
        <name>                      the real program, uid 1999, mode 0111
    <launcher path>                 protected_exec.c, uid 1999, mode 04111 (setuid)

:func:`protect_executable` runs as root inside the sandbox when it is prepared (POSIX sh
and coreutils only, plus two static helpers compiled on the host by
:mod:`harness.sandbox.static_tools`):

1. once per sandbox, ``strip_privileges.c`` clears every setuid/setgid bit and every file
   capability on the root filesystem, so the launcher is the only privilege transition left;
2. the program is moved (a rename: the bytes never leave the sandbox, the host never reads
   them) into :data:`PROTECTED_DIR` (copied to a fresh inode if it had other hard links);
   its sha256 and size are computed there, as root, and returned so copy-out can drop any
   file with those bytes, whatever its name; any other copy of those bytes on the root
   filesystem (the image's own, a former hard link) is made mode 0000, root's;
3. the launcher is installed where the agent expects the program.

The launcher opens the program with ``O_PATH`` while its effective uid is the owner (only
the directory search needs it; the file is never opened for reading), drops back to the
caller's real uid and gid and checks it, removes every ``LD_*`` variable and glibc's other
unsecure variables (``GCONV_PATH``, ``GLIBC_TUNABLES``, ``LOCPATH``, ... and ``TMPDIR``,
which glibc itself drops from a setuid program's environment), and runs the opened file
with ``execveat(fd, "", argv, env, AT_EMPTY_PATH)``, argv unchanged. So the program runs as the agent user (files it writes are the agent's), and:

* it cannot be read, copied, moved, renamed or hard-linked: it sits in a directory the
  agent cannot enter (moving or copying the launcher is harmless: it holds no program
  bytes, and it is still excluded from exports by name and by hash);
* the kernel marks the process non-dumpable because its user cannot read the file it runs:
  ``ptrace`` attach, ``/proc/<pid>/mem``, ``maps``, ``exe`` and ``fd`` are refused, and no
  core is dumped;
* no loader injection (``LD_PRELOAD``, ``LD_AUDIT``, ``GCONV_PATH`` modules...): the
  launcher removes those variables, and the agent cannot write the system's libraries or
  ``/etc/ld.so.preload`` (root's);
* a tracer started before the launcher (``strace ./reference_executable``) or
  ``no_new_privileges`` makes the kernel ignore the setuid bit: the launcher cannot open the
  program and exits 126 with a message.

What the program sees differs from a direct run only in: ``/proc/self/exe`` (the private
path), ``AT_EXECFN`` (``/dev/fd/<n>``) and the removed variables; ``argv[0]``, the working
directory, the other variables, the descriptors and the exit status are the caller's.

``no_new_privileges`` would disable the launcher, so a sandbox holding a protected program
runs without it; instead: (a) step 1 leaves no other setuid/setgid file or file capability
(without it, a binary with ``cap_dac_override+ep`` reads anything: measured), and the
launcher only transitions to an unprivileged uid that owns nothing but the protected
files; (b) the sandbox drops the capabilities the agent could otherwise gain from a file
(:data:`PROTECTED_SANDBOX_CAP_DROP`), keeping only what root set-up needs; the agent user
has no capabilities; (c) core dumps are off (``ulimit -c`` hard 0,
:data:`PROTECTED_SANDBOX_ULIMITS`). A root agent defeats all of this (``CAP_DAC_OVERRIDE``):
agent processes must run as the unprivileged user. A script cannot be protected: its
interpreter must read it.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import docker

from harness.sandbox import pack
from harness.sandbox.errors import ProtectedInstallFailed
from harness.sandbox.execution import ExecResult, run_exec
from harness.sandbox.pack import NewFile, pack_files
from harness.sandbox.static_tools import build_static

PROTECTED_DIR = "/.harness-protected"
PROTECTED_UID = 1999  # no passwd entry needed; owns nothing but the protected files
TARGET_MODE = "111"
LAUNCHER_MODE = "4111"
LAUNCHER_SOURCE = "protected_exec.c"
STRIP_SOURCE = "strip_privileges.c"
SWEPT_MARKER = f"{PROTECTED_DIR}/.swept"
# Docker's default capabilities minus those an agent could use through a file capability or
# that a cleanroom never needs; what root set-up needs stays (CHOWN, DAC_OVERRIDE, FOWNER,
# FSETID, SETUID, SETGID, KILL, SETPCAP).
PROTECTED_SANDBOX_CAP_DROP = (
    "NET_RAW", "SYS_PTRACE", "MKNOD", "AUDIT_WRITE", "SETFCAP", "SYS_CHROOT",
    "NET_BIND_SERVICE",
)
PROTECTED_SANDBOX_ULIMITS = (("core", 0, 0),)
_NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
_MISSING_EXIT = 3
PROTECT_TIMEOUT_S = 600
LAUNCHER_FAILED_PREFIX = b"protected-exec: "  # how the launcher's own errors start (exit 126)


class ProtectedMissing(ProtectedInstallFailed):
    """None of the candidate paths holds a program to protect (and none was protected)."""

    reason_code = "protected_missing"

# Run as root: sh -c SCRIPT sh DIR UID NAME LAUNCHER CANDIDATE...
PROTECT_SCRIPT = r"""
set -eu
dir=$1 uid=$2 name=$3 launcher=$4
shift 4
target=$dir/$name
if [ ! -e "$dir/.swept" ]; then
  "$dir/.strip" / > "$dir/.stripped"
  : > "$dir/.swept"
fi
rm -f "$dir/.strip"
chown "$uid:$uid" "$dir"
chmod 0700 "$dir"
src=
for c in "$@"; do
  if [ -f "$c" ] && [ ! -h "$c" ] && [ "$(stat -c %u "$c")" != "$uid" ]; then src=$c; break; fi
done
if [ -n "$src" ]; then
  if [ "$src" != "$target" ]; then mv -f "$src" "$target"; fi
elif [ ! -f "$target" ]; then
  echo "no program to protect at: $*" >&2; exit 3
fi
if [ "$(od -An -tx1 -N4 "$target" | tr -d ' \n')" != 7f454c46 ]; then
  echo "$src is not a compiled ELF executable (an execute-only script cannot run)" >&2; exit 4
fi
if [ "$(stat -c %h "$target")" != 1 ]; then
  # Other hard links would share the inode (and its new owner and mode): own a fresh copy.
  cp "$target" "$target.new"
  mv -f "$target.new" "$target"
fi
chown "$uid:$uid" "$target"
chmod 0111 "$target"
sha=$(sha256sum "$target" | cut -d' ' -f1)
size=$(wc -c < "$target")
# Any other copy of the same bytes on this filesystem (the image's own, or a former hard
# link) becomes unreadable and unrunnable: it would bypass the launcher.
find / -xdev -type f -size "${size}c" ! -path "$dir/*" -exec sha256sum {} + 2>/dev/null \
  | grep "^$sha  " | cut -c67- | while IFS= read -r copy; do
    chown 0:0 "$copy" && chmod 0000 "$copy" && echo "copy $copy"
  done
mkdir -p "$(dirname "$launcher")"
rm -f "$launcher"
mv "$dir/.launcher-$name" "$launcher"
chown "$uid:$uid" "$launcher"
chmod 4111 "$launcher"
echo "hash $sha $size"
echo "stat $(stat -c '%u:%a' "$dir" "$target" "$launcher" | tr '\n' ' ')"
sed 's/^/stripped /' "$dir/.stripped"
"""


@dataclass(frozen=True)
class ProtectedExecutable:
    """A program made protected inside one sandbox (see the module docstring)."""

    launcher: str  # the path the agent runs
    target: str  # the real file, in PROTECTED_DIR
    sha256: str  # of the real file, hashed inside the sandbox as root
    size: int
    launcher_sha256: str
    launcher_size: int
    stripped: tuple[str, ...] = field(default=())  # "setid <path>" / "fcaps <path>"
    copies: tuple[str, ...] = field(default=())  # other copies found, now mode 0000


def launcher_bytes(target: str) -> bytes:
    """The static launcher for the protected file at absolute ``target``."""
    return build_static(LAUNCHER_SOURCE, {"PROTECTED_TARGET": f'"{target}"'})


@dataclass(frozen=True)
class ProtectPlan:
    """A protection staged in a sandbox by :func:`plan_protection`: run :attr:`argv` as root
    (e.g. with :func:`~harness.sandbox.execution.run_exec`), then :func:`protection_result`."""

    argv: list[str]
    launcher: str
    target: str
    launcher_exe: bytes


def protect_executable(
    api: docker.APIClient,
    container_id: str,
    candidates: list[str],
    launcher: str,
    *,
    name: str | None = None,
) -> ProtectedExecutable:
    """Protect the first of ``candidates`` (paths in the sandbox) that is a regular file.

    Its bytes move to ``PROTECTED_DIR/<name>`` (default: the launcher's file name) and a
    launcher takes its place at ``launcher``. Idempotent: when no candidate is left but the
    protected file exists, only the launcher is (re)installed.
    """
    return _run_plan(api, container_id,
                     plan_protection(api, container_id, candidates, launcher, name=name))


def _run_plan(api: docker.APIClient, container_id: str, plan: ProtectPlan) -> ProtectedExecutable:
    res = run_exec(api, container_id, plan.argv, user="root", timeout=PROTECT_TIMEOUT_S)
    return protection_result(plan, res)


def plan_protection(
    api: docker.APIClient,
    container_id: str,
    candidates: list[str],
    launcher: str,
    *,
    name: str | None = None,
    extra: Sequence[NewFile] = (),
) -> ProtectPlan:
    """Copy the launcher and the privilege stripper in, with ``extra`` files (one tar); the
    command that then protects (see :func:`protect_executable`)."""
    name = name or posixpath.basename(launcher)
    if not _NAME_RE.match(name):
        raise ProtectedInstallFailed(f"{name!r} is not a valid protected file name")
    target = f"{PROTECTED_DIR}/{name}"
    exe = launcher_bytes(target)
    staged = [
        NewFile(f"{PROTECTED_DIR}/.launcher-{name}", exe, 0o700),
        NewFile(f"{PROTECTED_DIR}/.strip", build_static(STRIP_SOURCE), 0o700),
        *extra,
    ]
    where = ", ".join(f.path for f in staged)
    pack.put_archive(api, container_id, where, pack_files(staged))
    argv = ["sh", "-c", PROTECT_SCRIPT, "sh", PROTECTED_DIR, str(PROTECTED_UID), name,
            launcher, *candidates]
    return ProtectPlan(argv=argv, launcher=launcher, target=target, launcher_exe=exe)


def protection_result(plan: ProtectPlan, res: ExecResult) -> ProtectedExecutable:
    """What the plan's command did, checked; raises :class:`ProtectedMissing` (no program)
    or :class:`ProtectedInstallFailed`."""
    launcher, exe = plan.launcher, plan.launcher_exe
    out = res.stdout.decode(errors="replace")
    if not res.ok:
        err = res.stderr.decode(errors="replace").strip()[-400:]
        if res.exit_code == _MISSING_EXIT:
            raise ProtectedMissing(err)
        raise ProtectedInstallFailed(f"protecting {launcher} failed (exit {res.exit_code}): {err}")
    lines = out.splitlines()
    hashed = [ln.split() for ln in lines if ln.startswith("hash ")]
    stat = [ln.split()[1:] for ln in lines if ln.startswith("stat ")]
    want = [f"{PROTECTED_UID}:700", f"{PROTECTED_UID}:{TARGET_MODE}",
            f"{PROTECTED_UID}:{LAUNCHER_MODE}"]
    if len(hashed) != 1 or len(hashed[0]) != 3 or stat != [want]:
        raise ProtectedInstallFailed(
            f"protecting {launcher}: unexpected result {out.strip()[-400:]!r}, "
            f"expected owner:mode {' '.join(want)}"
        )
    return ProtectedExecutable(
        launcher=launcher,
        target=plan.target,
        sha256=hashed[0][1],
        size=int(hashed[0][2]),
        launcher_sha256=hashlib.sha256(exe).hexdigest(),
        launcher_size=len(exe),
        stripped=tuple(ln.split(" ", 1)[1] for ln in lines if ln.startswith("stripped ")),
        copies=tuple(ln.split(" ", 1)[1] for ln in lines if ln.startswith("copy ")),
    )


def install_protected(
    api: docker.APIClient, container_id: str, data: bytes, dest: str
) -> ProtectedExecutable:
    """Install host bytes as a protected executable run through a launcher at ``dest``."""
    if not data.startswith(b"\x7fELF"):
        raise ProtectedInstallFailed(
            f"{dest}: a protected artifact must be a compiled ELF executable "
            "(an execute-only script cannot run: its interpreter must read it)"
        )
    name = posixpath.basename(dest)
    staged = f"{PROTECTED_DIR}/{name}"
    plan = plan_protection(api, container_id, [staged], dest, name=name,
                           extra=[NewFile(staged, data, 0o100)])
    return _run_plan(api, container_id, plan)
