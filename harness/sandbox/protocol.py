"""The sandbox contract: what every agent (and the model proxy's link) may use of a sandbox.

One signature, no probing: an agent types its sandbox as :class:`Sandbox` and calls what is
here, nothing else. Two implementations satisfy it (mypy checks the structure, and the
self-check suite ``tests/sandbox/test_self_check.py`` runs the behaviour against both):

* :class:`harness.sandbox.container.Sandbox`: a harness container (ProgramBench, the
  selftest); ``exec`` runs as the user asked for, else the sandbox's default :attr:`user`;
* :class:`benchmarks.cowork_bench.agents.AgentBox`: Cowork's agent container as the agent
  sees it; every command runs as the unprivileged agent user in the task workspace, whatever
  user or directory the caller asks for.

What each member promises:

* :attr:`name`, :attr:`id`: the container's name and id (a gateway's ``executor_ref``, logs);
* :attr:`user`, :attr:`workdir`: whom and where ``exec`` runs by default;
* :meth:`exec`: run a command, wait for it; on ``timeout`` its process tree is killed and the
  result says ``timed_out`` (the sandbox stays usable); output is bounded: the first
  ``max_output`` bytes of each stream, then (``tail_output``) its last bytes, with totals and
  the cut recorded in the :class:`~harness.sandbox.execution.ExecResult`;
* :meth:`copy_in` / :meth:`copy_out`: a host file or tree in; a tree out, bounded and inert
  (links never followed, protected files never copied);
* :meth:`exit_state`: death detection: how the sandbox ended since a moment (running, ended
  from inside, killed from outside), None when the harness removed it itself;
* :meth:`end_user_processes`: kill what a user left running (an agent's leftovers);
* :attr:`client`, :attr:`spec`: what the model proxy's link
  (:meth:`harness.model_proxy.network.GatewayLink.open`) needs to put a relay beside it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import docker

    from harness.sandbox.container import SandboxSpec
    from harness.sandbox.execution import ContainerExit, ExecResult
    from harness.sandbox.transfer import Exclude


@runtime_checkable
class Sandbox(Protocol):
    """A running sandbox an agent works in (see the module docstring for the promises)."""

    @property
    def name(self) -> str: ...

    @property
    def id(self) -> str: ...

    @property
    def user(self) -> str:
        """The user :meth:`exec` runs as when none is asked for."""
        ...

    @property
    def workdir(self) -> str | None:
        """The directory :meth:`exec` runs in when none is asked for (None: the image's)."""
        ...

    @property
    def client(self) -> docker.DockerClient: ...

    @property
    def spec(self) -> SandboxSpec: ...

    def exec(
        self,
        cmd: str | Sequence[str],
        *,
        user: str | None = None,
        timeout: float | None = None,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        max_output: int = ...,
        tail_output: int = ...,
    ) -> ExecResult: ...

    def copy_in(
        self, src: Path, dest_dir: str, *, uid: int | None = None, gid: int | None = None
    ) -> None: ...

    def copy_out(self, src: str, dest: Path, *, exclude: Exclude | None = None) -> list[str]: ...

    def exit_state(self, since: float) -> ContainerExit | None:
        """Running, or how it ended since ``since`` (epoch s); None when the harness removed
        it itself. Raises :class:`~harness.sandbox.errors.SandboxError` when the engine
        cannot say."""
        ...

    def end_user_processes(self, user: str) -> str:
        """Kill every process of ``user`` (never root); the survivors, "" when none."""
        ...
