"""``--agent host-command``: an agent that runs on the host and drives the sandbox
(SWE-agent, OpenHands and the like), given by ``--agent-command CMD``.

CMD runs with ``bash -c`` in the instance folder, in its own process group. Its environment
is not the runner's: only the basics (:data:`BASE_ENV`: ``PATH``, ``HOME``, locale, Python's
and pyenv's variables) and the variables named with ``--agent-env`` (a model key the agent
needs) are passed, so a provider key, cloud credentials or ``HARNESS_MODEL_API_KEY`` in the
runner's environment stay out of reach of the agent under test. Plus:

- ``HARNESS_INSTANCE_ID``; ``HARNESS_INSTRUCTION_FILE`` (the instruction, on the host);
- ``HARNESS_SANDBOX`` (the container's name, for the record) and ``HARNESS_EXEC_SOCKET``,
  which ``harness exec`` uses to run commands in the sandbox as the agent user (see
  :mod:`harness.agents.host_exec`): the agent needs no Docker socket;
- ``HARNESS_COST_FILE``: where the agent may write ``{"cost_usd": N, "prompt_tokens": N,
  "completion_tokens": N}``; read back as untrusted input (bounded, regular file only), it
  becomes the row's cost (source ``agent_reported``).

With ``--model-upstream URL`` the agent's model calls go through the model gateway
(:mod:`harness.model_proxy`), here on a loopback port of its own per instance:
``OPENAI_BASE_URL``/``ANTHROPIC_BASE_URL`` point at it and ``OPENAI_API_KEY``/
``ANTHROPIC_API_KEY`` hold a per-instance token, the only credential it serves. Every call
is metered; the row's cost is the gateway's (source ``gateway``), and
``--per-task-limit-usd`` refuses calls past it (HTTP 402; the row says
``per_task_limit_reached``). The model is pinned as for the command agent
(:func:`harness.agents.command_proxy.gateway_pin`: ``--solve-model`` and ``--allow-model``;
403 ``model_not_allowed`` for any other), and the row lists the calls per model
(``models``). Without ``--model-upstream`` the harness does not see the agent's calls, so
``--per-task-limit-usd`` is refused.

The provider key is not in the agent's environment, but the agent runs on the host as the
runner's user, and the runner's processes (the controller, each xdist worker) started with
the key in their environment block (``/proc/<pid>/environ``), which removing it from
``os.environ`` does not clear. So every runner process that builds this agent with
``--model-upstream`` makes itself non-dumpable (:func:`protect_key_holder`): the kernel then
refuses its ``environ``, ``mem`` and ``ptrace`` to every other non-root process, the agent
included. The limits: an agent running as root (or with ``CAP_SYS_PTRACE``) can read any
process, so run the runner as a non-root user for host agents; a process above the runner
whose own environment block holds the key (a shell started with it) is not covered.

Host agents are kept apart (:mod:`harness.agents.host_isolation`): each runs in a PID and
user namespace of its own, so it sees no other agent's processes (their environment holds
their gateway token), and its exec socket answers only processes of that namespace (the row's
``exec_refused`` counts the others). Where the machine cannot make the namespaces, the row
says ``host_isolation: none: ...`` and the socket admits only the agent's session.

The task timeout kills the whole process group (``deadline_local``, truncated). stdout and
stderr are stored in the instance folder, each cut at :data:`MAX_LOG_BYTES`.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from harness.agents.base import (
    Agent,
    AgentOptions,
    AgentOutcome,
    AgentRequest,
    register_agent,
)
from harness.agents.host_exec import SOCKET_ENV, ExecService
from harness.agents.host_isolation import (
    ISOLATED,
    PeerCheck,
    isolation,
    launch_argv,
    launch_env,
)
from harness.core.errors import InfraError
from harness.core.fsutil import atomic_write_json
from harness.core.models import Tokens
from harness.core.untrusted import is_regular_file, read_untrusted_bytes

if TYPE_CHECKING:  # the model gateway loads only with --model-upstream
    from harness.model_proxy.pinning import ModelPin
    from harness.model_proxy.prices import ModelPrices
    from harness.model_proxy.usage import InstanceMeter

MAX_LOG_BYTES = 8 << 20
MAX_COST_FILE_BYTES = 64 << 10
STDOUT_NAME = "host_agent_stdout.log"
STDERR_NAME = "host_agent_stderr.log"
RECORD_NAME = "host_agent.json"
INSTRUCTION_NAME = "host_agent_instruction.md"
COST_NAME = "host_agent_cost.json"
KILL_GRACE_S = 5.0


# What any program needs to start on the host; every other variable must be named.
# Python's bytecode settings too: without them the agent's own ``harness exec`` wrote
# ``__pycache__`` into the harness's installation where the runner had turned that off.
BASE_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ",
            "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV", "PYENV_ROOT", "PYENV_VERSION",
            "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")


def agent_environment(environ: Mapping[str, str], names: Sequence[str]) -> dict[str, str]:
    """The host agent's environment: :data:`BASE_ENV`, ``LC_*`` and the ``names`` given."""
    keep = set(BASE_ENV) | set(names)
    return {k: v for k, v in environ.items() if k in keep or k.startswith("LC_")}


class HostRunRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_: str = Field(default="harness.agents.host_command_run.v1", alias="schema")
    command: str
    sandbox: str | None
    exit_code: int | None
    timed_out: bool
    wall_s: float
    exec_calls: int
    exec_refused: int = 0  # connections to the exec socket from outside the agent
    isolation: str = "none"  # pid_namespace, or none: <why> (harness.agents.host_isolation)
    stdout_bytes: int
    stderr_bytes: int
    output_truncated: bool
    cost_file: str | None = None
    cost_error: str | None = None


class ReportedCost(BaseModel):
    model_config = ConfigDict(extra="ignore")

    cost_usd: float | None = Field(default=None, ge=0)
    prompt_tokens: int | None = Field(default=None, ge=0)
    completion_tokens: int | None = Field(default=None, ge=0)


def _pump(src: IO[bytes], dest: Path, limit: int, stats: dict[str, Any]) -> None:
    """Copy at most ``limit`` bytes of ``src`` to ``dest``; drain (and count) the rest."""
    total = 0
    with dest.open("wb") as out:
        while True:
            chunk = src.read(1 << 16)
            if not chunk:
                break
            room = limit - total
            if room > 0:
                out.write(chunk[:room])
            total += len(chunk)
    stats["bytes"] = total
    stats["truncated"] = total > limit


def read_reported_cost(path: Path) -> tuple[ReportedCost | None, str | None]:
    if not path.exists():
        return None, None
    if not is_regular_file(path):
        return None, "not a regular file"
    try:
        data = read_untrusted_bytes(path, MAX_COST_FILE_BYTES)
        cost = ReportedCost.model_validate(json.loads(data))
    except (OSError, ValueError) as exc:
        return None, str(exc).splitlines()[0][:300]
    if cost.cost_usd is not None and not math.isfinite(cost.cost_usd):
        return None, "cost_usd is not finite"
    return cost, None


@dataclass(frozen=True)
class HostGateway:
    """``--model-upstream`` for a host agent: the model gateway on a loopback port."""

    upstream: str
    key_env: str
    prices: ModelPrices
    limit_usd: float | None
    pin: ModelPin | None = None


class HostCommandAgent(Agent):
    kind = "host-command"
    tape_route = "model_gateway"  # its model gateway on the runner's loopback: no relay

    def __init__(self, command: str, gateway: HostGateway | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        self.command = command
        self.gateway = gateway
        self._environ = environ

    @classmethod
    def from_options(cls, options: AgentOptions,
                     environ: Mapping[str, str] | None = None) -> HostCommandAgent:
        environ = os.environ if environ is None else environ
        cmd = options.command
        if not cmd or not (cmd.strip() if isinstance(cmd, str) else cmd):
            raise ValueError("--agent host-command needs the agent's command line "
                             "(--agent-command CMD)")
        gateway = None
        if options.model_upstream:
            gateway = _host_gateway(options, environ)
        elif options.per_task_limit_usd is not None:
            raise ValueError("--per-task-limit-usd cannot be enforced for agent kind "
                             "'host-command' without --model-upstream (its model calls do not "
                             "go through the harness): add --model-upstream URL, or drop "
                             "--per-task-limit-usd")
        return cls(cmd if isinstance(cmd, str) else " ".join(cmd), gateway, environ)

    def _launch(self, out_dir: Path, env: dict[str, str], service: ExecService,
                timeout: float | None) -> tuple[subprocess.Popen[bytes], bool, dict[str, Any],
                                         dict[str, Any]]:
        """Start the agent (in its own namespaces where the machine allows), admit only its
        processes to the exec socket, and wait for it, killing its group at the deadline."""
        isolated = isolation() == ISOLATED
        service.admit = lambda pid: False  # nobody, until the agent's own processes are known
        try:
            proc = subprocess.Popen(launch_argv(self.command, isolated), cwd=out_dir,
                                    env=launch_env(env, self.command, isolated),
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            raise InfraError(f"host-command could not start: {exc}",
                             "agent_command_not_found") from exc
        service.admit = PeerCheck(proc.pid, isolated)
        assert proc.stdout is not None and proc.stderr is not None
        stats_out: dict[str, Any] = {}
        stats_err: dict[str, Any] = {}
        pumps = [threading.Thread(target=_pump, daemon=True, args=(
                     proc.stdout, out_dir / STDOUT_NAME, MAX_LOG_BYTES, stats_out)),
                 threading.Thread(target=_pump, daemon=True, args=(
                     proc.stderr, out_dir / STDERR_NAME, MAX_LOG_BYTES, stats_err))]
        for t in pumps:
            t.start()
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
        finally:
            if proc.poll() is None:
                _kill_group(proc)
            for t in pumps:
                t.join(KILL_GRACE_S)
        return proc, timed_out, stats_out, stats_err

    def run(self, request: AgentRequest) -> AgentOutcome:
        sandbox = request.sandbox
        if sandbox is None:
            raise InfraError("host-command needs a sandbox, none was given", "agent_no_sandbox")
        out_dir = Path(request.instance_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        instruction = out_dir / INSTRUCTION_NAME
        instruction.write_text(request.instruction)
        cost_file = out_dir / COST_NAME
        cost_file.unlink(missing_ok=True)
        environ = os.environ if self._environ is None else self._environ
        service = ExecService(sandbox, max_timeout_s=request.timeout_sec).start()
        env = agent_environment(environ, request.env_allowlist)
        env.update({"HARNESS_INSTANCE_ID": request.instance_id,
                    "HARNESS_INSTRUCTION_FILE": str(instruction),
                    "HARNESS_SANDBOX": sandbox.name,
                    SOCKET_ENV: str(service.path),
                    "HARNESS_COST_FILE": str(cost_file)})
        started = time.monotonic()
        with _gateway_for(self.gateway, environ, env) as meter:
            try:
                proc, timed_out, stats_out, stats_err = self._launch(
                    out_dir, env, service, request.timeout_sec)
            finally:
                service.close()
        wall = time.monotonic() - started
        cost, cost_error = read_reported_cost(cost_file)
        record = HostRunRecord(
            command=self.command, sandbox=sandbox.name or None, exit_code=proc.returncode,
            timed_out=timed_out, wall_s=round(wall, 3), exec_calls=service.calls,
            exec_refused=service.refused, isolation=isolation(),
            stdout_bytes=int(stats_out.get("bytes", 0)),
            stderr_bytes=int(stats_err.get("bytes", 0)),
            output_truncated=bool(stats_out.get("truncated") or stats_err.get("truncated")),
            cost_file=str(cost_file) if cost is not None else None, cost_error=cost_error)
        record_path = out_dir / RECORD_NAME
        atomic_write_json(record_path, record)
        known = cost is not None and cost.cost_usd is not None
        tokens = Tokens()
        if cost is not None and (cost.prompt_tokens is not None
                                 or cost.completion_tokens is not None):
            p, c = cost.prompt_tokens or 0, cost.completion_tokens or 0
            tokens = Tokens(prompt=p, completion=c, total=p + c)
        common: dict[str, Any] = {
            "agent": self.kind, "exit_code": proc.returncode, "duration_s": round(wall, 3),
            "cost_usd": cost.cost_usd if known and cost is not None else None,
            "cost_known": known, "tokens": tokens,
            "output_paths": {"agent_stdout": str(out_dir / STDOUT_NAME),
                             "agent_stderr": str(out_dir / STDERR_NAME),
                             "agent_record": str(record_path)},
            "details": {"exec_calls": service.calls, "exec_refused": service.refused,
                        "host_isolation": isolation(),
                        "cost_source": "agent_reported" if known else "unknown"}}
        if meter is not None:  # the gateway's figures, not the agent's own
            from harness.agents.command_proxy import gateway_update, upstream_failure

            state, update = gateway_update(meter, out_dir)
            common["output_paths"].update(update.pop("paths"))
            common["details"].update(update.pop("details"))
            reason = update.pop("reason_code", None)
            common.update(update)
            if reason is not None:
                return AgentOutcome(completed=False, reason_code=reason, **common)
            if state.upstream_errors and proc.returncode != 0 and not timed_out:
                common["details"]["model_upstream_failure"] = upstream_failure(state)
                return AgentOutcome(completed=False, infra=True,
                                    reason_code="model_upstream_failed", **common)
        if timed_out:
            return AgentOutcome(completed=False, truncated=True, reason_code="deadline_local",
                                **common)
        if proc.returncode == 0:
            return AgentOutcome(completed=True, reason_code="completed", **common)
        return AgentOutcome(completed=False, reason_code="agent_exit_nonzero", **common)


def _host_gateway(options: AgentOptions, environ: Mapping[str, str]) -> HostGateway:
    from harness.agents.command_proxy import gateway_pin, gateway_upstream
    from harness.model_proxy.prices import load_prices

    upstream, key_env = gateway_upstream(options, environ)
    pin = gateway_pin(options)
    protect_key_holder()
    return HostGateway(upstream, key_env, load_prices(options.model_prices),
                       options.per_task_limit_usd, pin)


PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4


def protect_key_holder() -> bool:
    """Make this process non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``): its
    ``/proc/<pid>/environ``, ``mem`` and ``ptrace`` are then refused to every process but
    root's, so a host agent running as the same user cannot read the provider key from the
    environment block this process started with (taking the key out of ``os.environ`` does
    not clear that block). Children get the flag back at ``exec``. False where it cannot
    be set (not Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def key_holder_protected() -> bool:
    """True when this process is non-dumpable (:func:`protect_key_holder`)."""
    try:
        return int(ctypes.CDLL(None).prctl(PR_GET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


@contextlib.contextmanager
def _gateway_for(gateway: HostGateway | None, environ: Mapping[str, str],
                 env: dict[str, str]) -> Iterator[InstanceMeter | None]:
    """The model gateway of one instance on a loopback port (its URL and a per-instance
    token in ``env``), or nothing without ``--model-upstream``."""
    if gateway is None:
        yield None
        return
    from harness.model_proxy.server import GatewayServer
    from harness.model_proxy.usage import InstanceMeter

    key = environ.get(gateway.key_env)
    if not key:
        raise InfraError(f"the provider key ${gateway.key_env} is gone", "model_gateway_failed")
    token = "harness-gw-" + secrets.token_hex(16)
    pin = gateway.pin
    meter = InstanceMeter(gateway.prices, gateway.limit_usd,
                          pinned=None if pin is None else pin.allowed)
    server = GatewayServer(gateway.upstream, key, meter, token=token, pin=pin).start()
    assert server.base_url is not None
    env.update({"OPENAI_BASE_URL": f"{server.base_url}/v1",
                "OPENAI_API_BASE": f"{server.base_url}/v1",
                "ANTHROPIC_BASE_URL": server.base_url, "OPENAI_API_KEY": token,
                "ANTHROPIC_API_KEY": token, "HARNESS_MODEL_GATEWAY": f"{server.base_url}/v1"})
    try:
        yield meter
    finally:
        server.close()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(KILL_GRACE_S)


@register_agent("host-command", HostCommandAgent)
def _make(options: AgentOptions, environ: Mapping[str, str] | None = None) -> Agent:
    return HostCommandAgent.from_options(options, environ)
