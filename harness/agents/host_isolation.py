"""Keep host agents apart: each ``--agent host-command`` process tree in a PID namespace of
its own, and its ``harness exec`` socket answering only that namespace.

Host agents run as the runner's user, so before this any of them could open another
instance's exec socket (its path is in a folder only that user can enter, and every agent is
that user) and read another agent's ``/proc/<pid>/environ`` (its gateway token) at ``-n 2``.
A second uid per agent is not arrangeable in general (the runner's Python and ``harness
exec`` often live under a home only its user can enter). So the agent starts under
``unshare --user --map-root-user --mount --pid --fork --mount-proc --kill-child``:

* a new PID namespace with its own ``/proc``: the agent sees only its own processes, so no
  other agent's environment, memory or file descriptors, and cannot ptrace them;
* a new user namespace: its capabilities hold only there (it gains nothing on the host);
* a new mount namespace in which the container engine's sockets and state are covered
  (:data:`MASKED`), the agent then run one user and mount namespace further down, where
  those mounts are locked;
* ``--kill-child``: when the launcher dies, the namespace's first process dies, and with it
  every process of the namespace, however it left the process group;
* the exec socket checks each connection's peer (``SO_PEERCRED``): its pid must be in the
  agent's namespace (:class:`PeerCheck`); any other process is refused and counted.

Where ``unshare`` cannot make the namespaces (no util-linux, user namespaces disabled), the
agent runs as before and the socket admits only processes of the agent's session: that
stops a plain connection from another agent, not one that ptraces this agent (same uid).
The row says which (``host_isolation``).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

UNSHARE_FLAGS = ("--user", "--map-root-user", "--mount", "--pid", "--fork", "--mount-proc",
                 "--kill-child")
ISOLATED = "pid_namespace"
# What the container engine keeps on this host: its sockets (a root runner's agent is their
# owner) and its state (every sandbox's files). Each is covered in the agent's mount namespace
# (an empty, closed tmpfs over a folder; /dev/null over a socket) before the agent starts, and
# the agent then runs in a second user and mount namespace below, where those mounts are
# locked: it cannot take them off. DOCKER_HOST's socket, when it names one, is covered too.
MASKED = ("/run/docker.sock", "/run/docker", "/run/containerd", "/var/lib/docker",
          "/var/lib/containerd", "/run/podman", "/var/run/docker.sock")
MASK_FAILED_RC = 97
_SETUP = (
    'for p in "$@"; do '
    'if [ -d "$p" ] && [ ! -L "$p" ]; then mount -t tmpfs -o size=4k,mode=000 hx "$p" '
    f'|| exit {MASK_FAILED_RC}; '
    'elif [ -e "$p" ]; then mount --bind /dev/null "$p" '
    f'|| exit {MASK_FAILED_RC}; fi; done; '
    'exec unshare --user --map-root-user --mount bash -c "$HX_AGENT_COMMAND"')


@functools.lru_cache(maxsize=1)
def isolation() -> str:
    """:data:`ISOLATED` when this machine can start an agent in its own namespaces, else
    ``none: <why>`` (checked once per process, by starting ``true`` that way)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return "none: unshare (util-linux) is not installed"
    try:
        proc = subprocess.run(launch_argv("true", True), capture_output=True, text=True,
                              env=launch_env(dict(os.environ), "true", True), timeout=30,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"none: unshare failed ({exc})"
    if proc.returncode != 0:
        return f"none: unshare refused ({proc.stderr.strip()[:200]})"
    return ISOLATED


def masked_paths(environ: dict[str, str] | None = None) -> list[str]:
    """:data:`MASKED`, and the Unix sockets ``DOCKER_HOST`` names: the environment's, and
    the one the placed instance's engine is reached by (an ssh engine's tunnel socket)."""
    from harness.sandbox.active_engine import instance_environment

    paths = list(MASKED)
    env = environ if environ is not None else os.environ
    for host in (env.get("DOCKER_HOST", ""), instance_environment(env).get("DOCKER_HOST", "")):
        path = host.removeprefix("unix://")
        if host.startswith("unix://") and path not in paths:
            paths.append(path)
    return paths


def launch_argv(command: str, isolated: bool) -> list[str]:
    """The argv that runs ``bash -c command`` (in its own namespaces when ``isolated``; the
    command then comes in ``$HX_AGENT_COMMAND``, see :func:`launch_env`)."""
    if not isolated:
        return ["bash", "-c", command]
    return [shutil.which("unshare") or "unshare", *UNSHARE_FLAGS, "sh", "-c", _SETUP,
            "hx-agent", *masked_paths()]


def launch_env(env: dict[str, str], command: str, isolated: bool) -> dict[str, str]:
    return {**env, "HX_AGENT_COMMAND": command} if isolated else env


def _ns(pid: int, name: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/{name}")
    except OSError:
        return None


class PeerCheck:
    """Whether a process (by pid) belongs to the agent started as ``launcher``."""

    def __init__(self, launcher: int, isolated: bool) -> None:
        self.launcher = launcher
        self.isolated = isolated
        self._own = _ns(os.getpid(), "pid")
        self._agent_ns: str | None = None

    def agent_namespace(self) -> str | None:
        """The agent's PID namespace, once the launcher has made it (never this one's)."""
        if self._agent_ns is None:
            made = _ns(self.launcher, "pid_for_children")
            if made is not None and made != self._own:
                self._agent_ns = made
        return self._agent_ns

    def __call__(self, pid: int) -> bool:
        if pid <= 0:
            return False
        if not self.isolated:
            try:
                return os.getsid(pid) == self.launcher
            except OSError:
                return False
        want = self.agent_namespace()
        return want is not None and _ns(pid, "pid") == want
