"""The ``command`` agent: any CLI agent, run inside the sandbox as the agent user.

The instruction goes to ``/tmp/harness_instruction.md`` (its path in the environment as
``HARNESS_INSTRUCTION_FILE``) and, unless ``instruction_via="file"``, on stdin. Environment
variables named by the user are read from the runner's environment and handed to the
process on stdin (a NUL-separated block a small bash prologue exports, then execs the
agent): values never appear in any argv, in ``docker inspect`` or in a file. The command
runs under coreutils ``timeout`` (the task timeout), so it dies inside the container even if
the exec connection is lost. stdout and stderr go to the instance folder, with any
allow-listed value redacted, each capped: the first and the last ``OUTPUT_HEAD_BYTES`` /
``OUTPUT_TAIL_BYTES`` (1 MiB each) are kept, the total size and the cut are recorded
(``agent_command.json``), and the exec never holds more than that in memory.

Whatever the agent does, the outcome is the agent's (``infra`` false) with a reason code:
exit 0 = ``completed``; timeout = truncated ``deadline_local``; 126/127 = ``agent_exit_126``
/ ``agent_exit_127`` (the program is not executable / not found in the sandbox: the user's
command, not our machinery); killed by a signal = ``agent_killed_signal_<n>``; other codes =
``agent_exit_nonzero``; the sandbox ended from inside while the agent ran (its PID 1 died,
out of memory) = ``agent_sandbox_exited`` (``sandbox_lost``: nothing left to collect).
Only a failure of Docker itself (or a sandbox stopped from outside) raises ``InfraError``.
When the command ends, every process the agent's user left behind in the sandbox is killed
(as root), so nothing of the agent runs while its work is collected.
The agent never runs as root: a configured ``user`` of root is refused.
"""

from __future__ import annotations

import os
import re
import shlex
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from harness.agents.base import Agent, AgentOptions, AgentOutcome, AgentRequest
from harness.core.errors import InfraError
from harness.core.fsutil import atomic_write_bytes, atomic_write_json
from harness.sandbox.errors import SandboxError
from harness.sandbox.execution import ContainerExit, ExecResult
from harness.sandbox.protocol import Sandbox

INSTRUCTION_PATH = "/tmp/harness_instruction.md"
INSTRUCTION_ENV = "HARNESS_INSTRUCTION_FILE"
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
STDOUT_NAME = "agent_stdout.log"
STDERR_NAME = "agent_stderr.log"
RECORD_NAME = "agent_command.json"
# Exit statuses of coreutils ``timeout``: 124 after TERM, 137 after the follow-up KILL.
TIMEOUT_EXITS = frozenset({124, 137})
MIN_REDACT_LEN = 4
OUTPUT_HEAD_BYTES = 1 << 20  # kept from the start of each stored stream
OUTPUT_TAIL_BYTES = 1 << 20  # kept from the end
ROOT_USERS = frozenset({"root", "0"})
_SETTLE_S = 3.0  # how long a killed agent's sandbox may take to be reported as ended

# Reads NAME=VALUE entries (NUL-terminated, an empty entry ends the block) from stdin,
# exports them, then execs the agent under `timeout`. Arguments: workdir, timeout,
# kill-after, then the agent's argv.
_PROLOGUE = r"""
while IFS= read -r -d '' __hx_kv; do
  [ -z "$__hx_kv" ] && break
  export "$__hx_kv"
done
unset __hx_kv
__hx_wd=$1; __hx_t=$2; __hx_k=$3; shift 3
if [ -n "$__hx_wd" ]; then cd -- "$__hx_wd" || exit 125; fi
if [ "$__hx_t" != 0 ] && command -v timeout >/dev/null 2>&1; then
  exec timeout -k "$__hx_k" "$__hx_t" "$@"
fi
exec "$@"
"""


class CommandAgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str | list[str]
    env: list[str] = Field(default_factory=list)
    instruction_via: Literal["stdin", "file", "both"] = "both"
    user: str | None = None
    workdir: str | None = None
    kill_after_s: float = Field(default=10.0, ge=0)
    exec_margin_s: float = Field(default=30.0, ge=0)
    output_head_bytes: int = Field(default=OUTPUT_HEAD_BYTES, ge=0)
    output_tail_bytes: int = Field(default=OUTPUT_TAIL_BYTES, ge=0)

    @field_validator("user")
    @classmethod
    def _not_root(cls, value: str | None) -> str | None:
        if value is not None and value.split(":")[0] in ROOT_USERS:
            raise ValueError("the agent may not run as root: name an unprivileged user")
        return value

    @field_validator("env")
    @classmethod
    def _names(cls, names: list[str]) -> list[str]:
        bad = [n for n in names if not ENV_NAME_RE.match(n)]
        if bad:
            raise ValueError(f"not environment variable names: {bad}")
        return names

    @field_validator("command")
    @classmethod
    def _non_empty(cls, value: str | list[str]) -> str | list[str]:
        if not (value.strip() if isinstance(value, str) else value):
            raise ValueError("the agent command is empty")
        return value


class CommandRunRecord(BaseModel):
    """``agent_command.json``: how the agent was run (names only, never values)."""

    schema_: str = Field(default="harness.agents.command_run.v1", alias="schema")
    command: str | list[str]
    sandbox: str | None
    user: str | None
    workdir: str | None
    instruction_via: str
    instruction_file: str
    env_names: list[str]
    env_missing: list[str]
    timeout_sec: float | None
    # When the harness kills the process tree itself: timeout + kill-after + exec margin.
    exec_timeout_sec: float | None = None
    exit_code: int | None
    timed_out: bool
    wall_s: float
    redacted_values: int
    stdout_path: str
    stderr_path: str
    stdout_bytes: int = 0  # what the agent wrote, before the cap
    stderr_bytes: int = 0
    stdout_truncated: bool = False  # the stored file keeps only its head and tail
    stderr_truncated: bool = False
    output_cap_bytes: list[int] = Field(default_factory=list)  # [head, tail] kept per stream
    kill_survivors: str = ""  # pids that outlived the kills at the end (the agent escaped)
    sandbox_exit: dict[str, Any] | None = None  # the sandbox ended while the agent ran


def _as_bytes(data: Any) -> bytes:
    if data is None:
        return b""
    if isinstance(data, bytes):
        return data
    return str(data).encode("utf-8", "replace")


def env_block(values: Mapping[str, str]) -> bytes:
    """The stdin prologue block: ``NAME=VALUE\\0`` entries, then an empty entry."""
    out = bytearray()
    for name, value in values.items():
        if not ENV_NAME_RE.match(name) or "\0" in value:
            raise ValueError(f"cannot pass environment variable {name!r}")
        out += f"{name}={value}".encode() + b"\0"
    return bytes(out + b"\0")


def redact(data: bytes, secrets: Mapping[str, str]) -> tuple[bytes, int]:
    count = 0
    for name, value in secrets.items():
        raw = value.encode("utf-8", "replace")
        if len(raw) >= MIN_REDACT_LEN and raw in data:
            count += data.count(raw)
            data = data.replace(raw, f"[redacted:{name}]".encode())
    return data, count


class CommandKind(Agent):
    """The ``command`` kind's capabilities, shared by its two agents: the plain one
    (:class:`CommandAgent`) and the one behind the model gateway
    (:class:`harness.agents.command_proxy.GatewayCommandAgent`)."""

    kind = "command"
    runs_in_sandbox = True  # the --agent-repo checkout runs in the sandbox
    tape_route = "model_gateway"  # taped only behind its model gateway (--model-upstream)
    relays = ("model_gateway",)  # behind the model gateway: its relay beside the sandbox


class CommandAgent(CommandKind):

    def __init__(
        self, config: CommandAgentConfig, environ: Mapping[str, str] | None = None
    ) -> None:
        self.config = config
        self._environ = environ

    @classmethod
    def from_options(cls, options: AgentOptions) -> CommandAgent:
        if not options.command:
            raise ValueError("the command agent needs a command line (--agent-command)")
        config = CommandAgentConfig(
            command=options.command,
            env=list(options.env),
            instruction_via=options.instruction_via,  # type: ignore[arg-type]
            user=options.user,
            workdir=options.workdir,
        )
        if options.kill_after_s is not None:
            config.kill_after_s = options.kill_after_s
        if options.exec_margin_s is not None:
            config.exec_margin_s = options.exec_margin_s
        return cls(config)

    def missing_env(self, extra: Sequence[str] = ()) -> list[str]:
        """Allow-listed names absent from the runner's environment (a preflight check)."""
        environ = os.environ if self._environ is None else self._environ
        return [n for n in dict.fromkeys([*self.config.env, *extra]) if n not in environ]

    def _argv(self) -> list[str]:
        cmd = self.config.command
        return ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)

    def _env(self, names: Sequence[str], request: AgentRequest) -> tuple[dict[str, str], list[str]]:
        environ = os.environ if self._environ is None else self._environ
        values: dict[str, str] = {}
        missing: list[str] = []
        for name in dict.fromkeys(names):
            if name in environ:
                values[name] = environ[name]
            else:
                missing.append(name)
        values[INSTRUCTION_ENV] = INSTRUCTION_PATH
        values["HARNESS_INSTANCE_ID"] = request.instance_id
        return values, missing

    def run(self, request: AgentRequest) -> AgentOutcome:
        sandbox = request.sandbox
        if sandbox is None:
            raise InfraError(
                "the command agent needs a sandbox, none was given", "agent_no_sandbox"
            )
        cfg = self.config
        user = cfg.user
        workdir = cfg.workdir or sandbox.workdir
        names = [*cfg.env, *request.env_allowlist]
        bad = [n for n in names if not ENV_NAME_RE.match(n)]
        if bad:
            raise ValueError(f"not environment variable names: {bad}")
        env, missing = self._env(names, request)
        secrets = {n: env[n] for n in names if n in env}

        _write_instruction(sandbox, user, request.instruction)
        timeout = request.timeout_sec
        stdin = env_block(env)
        if cfg.instruction_via in ("stdin", "both"):
            stdin += request.instruction.encode("utf-8")
        argv = [
            "bash",
            "-c",
            _PROLOGUE,
            "harness-agent",
            workdir or "",
            _fmt(timeout or 0),
            _fmt(cfg.kill_after_s),
            *self._argv(),
        ]
        exec_timeout = None if not timeout else timeout + cfg.kill_after_s + cfg.exec_margin_s
        result, lost, wall = self._exec(sandbox, argv, user, exec_timeout, stdin)
        leftovers = "" if lost is not None else _end_leftovers(sandbox, user)

        out_dir = Path(request.instance_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        stdout_path, stderr_path = out_dir / STDOUT_NAME, out_dir / STDERR_NAME
        out = _store(stdout_path, result, "stdout", secrets, cfg)
        err = _store(stderr_path, result, "stderr", secrets, cfg)

        exit_code = result.exit_code if result is not None else None
        timed_out = (result is not None and result.timed_out) or (
            bool(timeout) and exit_code in TIMEOUT_EXITS and wall >= 0.95 * float(timeout or 0)
        )
        record = CommandRunRecord(
            command=_redact_command(cfg.command, secrets),
            sandbox=sandbox.name or None,
            user=user or sandbox.user,
            workdir=workdir,
            instruction_via=cfg.instruction_via,
            instruction_file=INSTRUCTION_PATH,
            env_names=sorted(secrets),
            env_missing=missing,
            timeout_sec=timeout,
            exec_timeout_sec=exec_timeout,
            exit_code=exit_code,
            timed_out=timed_out,
            wall_s=round(wall, 3),
            redacted_values=out.redacted + err.redacted,
            stdout_path=str(stdout_path),
            stderr_path=str(stderr_path),
            stdout_bytes=out.total,
            stderr_bytes=err.total,
            stdout_truncated=out.truncated,
            stderr_truncated=err.truncated,
            output_cap_bytes=[cfg.output_head_bytes, cfg.output_tail_bytes],
            kill_survivors=" ".join(
                x for x in (result.survivors if result is not None else "", leftovers) if x
            ),
            sandbox_exit=None if lost is None else _exit_details(lost),
        )
        record_path = out_dir / RECORD_NAME
        atomic_write_json(record_path, record)
        return _outcome(record, record_path)

    def _exec(self, sandbox: Sandbox, argv: list[str], user: str | None,
              exec_timeout: float | None, stdin: bytes
              ) -> tuple[ExecResult | None, ContainerExit | None, float]:
        """The agent's command in the sandbox: its result (None when the sandbox ended under
        it), how the sandbox ended if it did, and the wall time."""
        cfg = self.config
        started = time.monotonic()
        since = time.time()
        lost: ContainerExit | None = None
        result: ExecResult | None
        try:
            result = sandbox.exec(
                argv, user=user, timeout=exec_timeout, stdin=stdin,
                max_output=cfg.output_head_bytes, tail_output=cfg.output_tail_bytes,
            )
        except SandboxError:
            lost = _lost_sandbox(sandbox, since)
            if lost is None:
                raise  # Docker itself failed, or the sandbox was stopped from outside
            result = None
        if result is not None:
            code = result.exit_code
            # killed or unknown: the container may be dying right now; let it settle
            settle = code is None or code > 128
            lost = _lost_sandbox(sandbox, since, settle_s=_SETTLE_S if settle else 0.0)
        wall = float((result.wall_s if result is not None else None)
                     or time.monotonic() - started)
        return result, lost, wall


def _write_instruction(sandbox: Sandbox, user: str | None, instruction: str) -> None:
    """The instruction to :data:`INSTRUCTION_PATH` in the sandbox (readable by ``user``
    alone), or :class:`InfraError`."""
    written = sandbox.exec(
        ["bash", "-c", f"umask 077 && cat > {shlex.quote(INSTRUCTION_PATH)}"],
        user=user,
        timeout=60,
        stdin=instruction.encode("utf-8"),
    )
    if written.exit_code != 0 or written.timed_out:
        raise InfraError(
            f"could not write {INSTRUCTION_PATH} in the sandbox (exit {written.exit_code}):"
            f" {_as_bytes(written.stderr).decode('utf-8', 'replace')[-300:]}",
            "agent_instruction_write_failed",
        )


class _Stored(BaseModel):
    total: int
    truncated: bool
    redacted: int


def _store(
    path: Path, result: ExecResult | None, stream: Literal["stdout", "stderr"],
    secrets: Mapping[str, str], cfg: CommandAgentConfig,
) -> _Stored:
    """Write one stream: head, a marker line, tail when cut; secrets redacted; bounded."""
    if result is None:
        data, total, cut = b"", 0, None
    elif stream == "stdout":
        data, total, cut = result.stdout, result.stdout_total, result.stdout_cut
    else:
        data, total, cut = result.stderr, result.stderr_total, result.stderr_cut
    data = _as_bytes(data)
    total = int(total or len(data))
    head_limit, tail_limit = cfg.output_head_bytes, cfg.output_tail_bytes
    head, tail = (data, b"") if cut is None else (data[:cut], data[cut:])
    if cut is None and len(head) <= head_limit + tail_limit:
        body, count = redact(head, secrets)
        atomic_write_bytes(path, body)
        return _Stored(total=total, truncated=False, redacted=count)
    # Cut (or over the caps: an exec that could not cap as asked): keep our head and tail.
    if cut is None:
        head, tail = data[:head_limit], data[head_limit:]
    head = head[:head_limit]
    tail = tail[len(tail) - tail_limit :] if tail_limit and len(tail) > tail_limit else tail
    tail = tail if tail_limit else b""
    kept = len(head) + len(tail)
    head, n_head = redact(head, secrets)
    tail, n_tail = redact(tail, secrets)
    before = len(head) + len(tail)
    head, tail = _strip_partial_secrets(head, tail, secrets)
    kept -= before - len(head) - len(tail)
    omitted = total - kept
    note = (
        f"\n[harness: {omitted} bytes omitted here; the agent wrote {total} bytes; "
        f"kept its start and its end]\n"
    ).encode()
    atomic_write_bytes(path, head + note + tail)
    return _Stored(total=total, truncated=True, redacted=n_head + n_tail)


def _strip_partial_secrets(
    head: bytes, tail: bytes, secrets: Mapping[str, str]
) -> tuple[bytes, bytes]:
    """A secret cut in two at the cut: drop its start ending the head, its end opening the
    tail (whole copies are already redacted)."""
    for value in secrets.values():
        raw = value.encode("utf-8", "replace")
        for k in range(len(raw) - 1, 0, -1):
            if head.endswith(raw[:k]):
                head = head[:-k]
                break
        for k in range(len(raw) - 1, 0, -1):
            if tail.startswith(raw[-k:]):
                tail = tail[k:]
                break
    return head, tail


def _end_leftovers(sandbox: Sandbox, user: str | None) -> str:
    """End every process the agent left behind (daemons, children that left its session)
    so nothing of it runs while its work is collected; the survivors, if any."""
    user = user or sandbox.user
    if not user or user.split(":")[0] in ROOT_USERS:
        return ""
    try:
        return sandbox.end_user_processes(user)
    except SandboxError as exc:
        return f"(could not end leftovers: {exc})"


def _lost_sandbox(
    sandbox: Sandbox, since: float, settle_s: float = _SETTLE_S
) -> ContainerExit | None:
    """The sandbox's exit when it ended from inside while the agent ran, else None.

    A sandbox the harness removed, or one stopped from outside, is not the agent's doing;
    one the engine cannot answer for cannot be checked.
    """
    deadline = time.monotonic() + settle_s
    while True:
        try:
            state = sandbox.exit_state(since)
        except SandboxError:
            return None
        if state is None:
            return None
        if not state.running or time.monotonic() >= deadline:
            return state if state.from_inside else None
        time.sleep(0.1)


def _exit_details(state: ContainerExit) -> dict[str, Any]:
    return {"exit_code": state.exit_code, "oom": state.oom, "cause": "ended_from_inside"}



def _redact_command(command: str | list[str], secrets: Mapping[str, str]) -> str | list[str]:
    def clean(text: str) -> str:
        return redact(text.encode("utf-8"), secrets)[0].decode("utf-8", "replace")

    return clean(command) if isinstance(command, str) else [clean(c) for c in command]


def _fmt(seconds: float) -> str:
    return f"{seconds:g}" if seconds else "0"


def reason_for_exit(exit_code: int | None) -> str:
    """The agent-failure reason of a non-zero (or unknown) exit status."""
    if exit_code is None:
        return "agent_exit_unknown"
    if exit_code in (126, 127):  # not executable / not found: the user's command line
        return f"agent_exit_{exit_code}"
    if 128 < exit_code < 160:
        return f"agent_killed_signal_{exit_code - 128}"
    return "agent_exit_nonzero"


def _outcome(record: CommandRunRecord, record_path: Path) -> AgentOutcome:
    paths = {
        "agent_stdout": record.stdout_path,
        "agent_stderr": record.stderr_path,
        "agent_command": str(record_path),
    }
    details: dict[str, Any] = {"env_missing": record.env_missing, "user": record.user}
    if record.stdout_truncated or record.stderr_truncated:
        details["output_truncated"] = {
            "stdout_bytes": record.stdout_bytes,
            "stderr_bytes": record.stderr_bytes,
            "kept_head_tail_bytes": record.output_cap_bytes,
        }
    if record.kill_survivors:
        details["kill_survivors"] = record.kill_survivors
    common: dict[str, Any] = {
        "agent": "command",
        "exit_code": record.exit_code,
        "duration_s": record.wall_s,
        "output_paths": paths,
        "cost_usd": None,
        "cost_known": False,
        "details": details,
    }
    if record.sandbox_exit is not None:
        details["sandbox_exit"] = record.sandbox_exit
        return AgentOutcome(
            completed=False, reason_code="agent_sandbox_exited", sandbox_lost=True, **common
        )
    if record.timed_out:
        return AgentOutcome(completed=False, truncated=True, reason_code="deadline_local", **common)
    if record.exit_code == 0:
        return AgentOutcome(completed=True, reason_code="completed", **common)
    return AgentOutcome(completed=False, reason_code=reason_for_exit(record.exit_code), **common)

