"""One Cowork instance on Docker: sidecar, agent phase, eval phase, teardown.

Sandbox layout (both phases): ``/workspace`` is the checkout root (the support tree: every
top-level entry except ``tasks``, ``db``, ``.git`` and run output, plus this task under
``tasks/finalpool/<task>``); the agent workspace is ``/workspace/dumps/workspace``. The agent
container holds a *sanitised* task (no ``groundtruth_workspace*``, no ``evaluation``, like
upstream's rsync); the eval container, started after the agent container is gone, holds the
full task and a copy of the workspace. ``TZ=UTC`` and ``PGTZ=UTC`` everywhere.

Who is who. ``/workspace`` and ``/workspace/dumps`` are root's; this task's sanitised tree
(preprocess may rebuild its ``tmp/``), the workspace and the agent log folder are the
``agent`` user's (made through the daemon, see :mod:`.containers`). Preprocess
and the agent run as ``agent``; the agent container's environment holds only the agent's
database role (preprocess gets the checker's role in its own exec environment, before the
sidecar locks that role out for the agent phase). After copy-out the workspace is made inert
(:mod:`benchmarks.cowork_bench.workspace`: links leaving it and special files removed, listed
in ``workspace_sanitised.json``) and reaches the eval container by a no-follow pack.
With ``--agent command --agent-repo DIR`` the agent container also holds the agent's seed,
root's and read-only for the agent, at ``/opt/agent_seed`` (``$HARNESS_AGENT_REPO``;
:mod:`.seed`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from benchmarks.cowork_bench import models as m
from benchmarks.cowork_bench.containers import (
    AGENT,
    AGENT_ID,
    Limits,
    RunIdentity,
    container_spec,
)
from benchmarks.cowork_bench.eval_once import CheckerRequest, CheckerRun, now_iso
from benchmarks.cowork_bench.mcp_servers import (
    INVENTORY_NAME,
    LOG_DIR_NAME,
    MCP_DIR,
    OUTSIDE_CONFIG_NAME,
    McpInventory,
    container_env,
    has_logs,
    local_servers_path,
    plan_servers,
    start_servers,
)
from benchmarks.cowork_bench.seed import SEED_ENV, SEED_PATH, SeedTar
from benchmarks.cowork_bench.sidecar import PgSidecar
from benchmarks.cowork_bench.tasks import CoworkTask, TaskDocs, read_docs, task_dir
from benchmarks.cowork_bench.workspace import SANITISED_NAME, pack_workspace, sanitise_workspace
from harness.api import (
    CopyLimits,
    CopyRefused,
    ExecResult,
    InfraError,
    NewDir,
    Sandbox,
    atomic_write_json,
    atomic_write_text,
    join_tars,
    pack_dirs,
    pack_tree,
    phase_deadline,
)

ROOT = "/workspace"
WORKSPACE = "/workspace/dumps/workspace"
AGENT_LOGS = "/workspace/dumps/agent"
SCRATCH = "/workspace/dumps/eval_scratch"
WORKSPACE_PLACEHOLDER = "!!<<<<||||workspace_dir||||>>>>!!"
SUPPORT_EXCLUDE = frozenset(
    {".git", "tasks", "db", "dumps", "benchmark_logs", ".venv", "node_modules", "__pycache__"}
)
SANITISE = frozenset({"groundtruth_workspace", "groundtruth_workspace_cn", "evaluation"})
BASE_ENV = {"TZ": "UTC", "PGTZ": "UTC", "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}


@dataclass
class InstanceEnv:
    """What one instance's phases share."""

    task: CoworkTask
    bench_root: Path
    inst_dir: Path
    network: str
    sidecar: PgSidecar
    ident: RunIdentity
    runtime_image: str  # image id of the runtime recipe
    timings: dict[str, float] = field(default_factory=dict)
    ttl_s: int = 7200  # containers expire by themselves after this (agent timeout + margin)
    docs: TaskDocs | None = None  # the task's docs, when the caller has read them already
    limits: Limits = field(default_factory=Limits)
    sandbox_runtime: str | None = None  # OCI runtime of the agent container (--runtime)
    allow_missing_tools: bool = False  # run the agent even when a named MCP server failed
    copy_limits: CopyLimits = field(default_factory=CopyLimits)  # every copy out (--max-copy-out-*)
    seed: SeedTar | None = None  # the agent's checkout, copied into the agent container
    # --phase-timeout: seconds per phase (provision: the sidecar and the MCP servers)
    deadlines: Mapping[str, float | None] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        """The harness's steps (preprocess, checker): the checker's database role."""
        return {**BASE_ENV, **self.sidecar.client_env()}

    @property
    def agent_env(self) -> dict[str, str]:
        """The agent container and its processes: the unprivileged database role, and where
        its MCP servers are (``MCP_CLIENT_CONFIG``, ``MCP_HTTP_URLS``)."""
        seed = {SEED_ENV: SEED_PATH} if self.seed is not None else {}
        return {**BASE_ENV, **container_env(self.task, self.local_servers),
                **self.sidecar.agent_env(), **seed}

    @property
    def local_servers(self) -> str:
        """Where the agent container's image keeps ``${local_servers_paths}``."""
        return local_servers_path(self.runtime_image)


class AgentOutcome(BaseModel):
    status: m.BenchStatus
    reason_code: str | None = None
    infra_failed: bool = False
    messages: list[dict[str, object]] = []
    tool_calls: list[dict[str, object]] = []


@dataclass
class AgentContext:
    """What an agent step gets: its container, the task text and prompt, a deadline."""

    env: InstanceEnv
    container: Sandbox
    task_text: str
    system_prompt: str
    deadline: float  # time.monotonic() value
    mcp: McpInventory | None = None  # the task's MCP servers in this attempt

    def exec(self, cmd: list[str], timeout_sec: float | None = None) -> ExecResult:
        left = max(1.0, self.deadline - time.monotonic())
        return self.container.exec(
            cmd,
            env=self.env.agent_env,
            workdir=ROOT,
            timeout=min(left, timeout_sec) if timeout_sec else left,
            user=AGENT,
        )


AgentStep = Callable[[AgentContext], AgentOutcome]


@lru_cache(maxsize=8)
def support_tar(bench_root: str, prefix: str = "") -> bytes:
    """Everything at the checkout root the task code may import or read, minus ``tasks``;
    names relative to the checkout root, under ``prefix`` (``workspace/``: at ``/``)."""
    root = Path(bench_root)
    entries = [(p, prefix + p.name) for p in sorted(root.iterdir())
               if p.name not in SUPPORT_EXCLUDE]  # fmt: skip
    return pack_tree(entries, uid=0, gid=0, exclude_names={"__pycache__", ".git"})


def task_tar(env: InstanceEnv, sanitised: bool, prefix: str = "") -> bytes:
    """This task's tree; the sanitised copy (agent container) is the agent user's, so its
    preprocess may rebuild ``tasks/finalpool/<task>/tmp`` (mock pages) as upstream's
    writable staging allows; the eval container gets a fresh root-owned full copy."""
    exclude = SANITISE | {"__pycache__"} if sanitised else frozenset({"__pycache__"})
    arc = f"{prefix}tasks/finalpool/{env.task.instance_id}"
    owner = AGENT_ID if sanitised else 0
    return pack_tree([(task_dir(env.bench_root, env.task.instance_id), arc)],
                     uid=owner, gid=owner, exclude_names=exclude)  # fmt: skip


def setup_tar(env: InstanceEnv, agent: bool, sanitised: bool) -> bytes:
    """A container's set-up as one tar to unpack at ``/`` (one ``put_archive``): the
    directories (``/workspace`` and ``/workspace/dumps`` root's, the workspace and the log
    folder the agent's in the agent container), the support tree, the task tree and, in the
    agent container, the agent's seed. ``/workspace`` keeps the time of the copy, as when
    the trees were a copy of their own after the directories."""
    uid = AGENT_ID if agent else 0
    dirs = pack_dirs([
        NewDir(ROOT, mtime=time.time()), NewDir("/workspace/dumps"),
        NewDir(WORKSPACE, uid, uid), NewDir(AGENT_LOGS, uid, uid), NewDir(SCRATCH),
    ])  # fmt: skip
    prefix = ROOT.strip("/") + "/"
    parts = [dirs, support_tar(str(env.bench_root), prefix), task_tar(env, sanitised, prefix)]
    if agent and env.seed is not None:
        parts.append(env.seed.data)
    return join_tars(parts)


def _start(env: InstanceEnv, role: str, sanitised: bool, runtime: str | None = None) -> Sandbox:
    """The agent container (``sanitised`` task, the agent's user and database role) or an
    eval container (full task, root without capabilities, the checker's role)."""
    agent = role == "agent"
    container = Sandbox.create(container_spec(
        env.runtime_image, env.ident, env.task.instance_id,
        network=env.network, role=role, env=env.agent_env if agent else env.env,
        ttl_s=env.ttl_s, limits=env.limits, user=AGENT if agent else "0",
        runtime=runtime,
    ))  # fmt: skip
    container.copy_limits = env.copy_limits
    try:
        container.put_archive("/", setup_tar(env, agent, sanitised))
    except BaseException:
        container.remove()
        raise
    return container


def render_prompt(text: str, workspace: str = WORKSPACE) -> str:
    return text.replace(WORKSPACE_PLACEHOLDER, workspace)


def traj_config(
    env: InstanceEnv, launch_time: str, system_prompt: str, task_text: str
) -> m.TrajConfig:
    t = env.task
    rel = f"tasks/finalpool/{t.instance_id}"
    return m.TrajConfig(
        task_dir=t.instance_id,
        id=t.instance_id,
        needed_mcp_servers=list(t.servers),
        needed_local_tools=list(t.local_tools),
        task_root="/workspace/dumps",
        task_str=task_text,
        log_file="/workspace/dumps/traj_log.json",
        agent_workspace=WORKSPACE,
        launch_time=launch_time,
        max_turns=t.max_turns,
        system_prompts={"agent": system_prompt, "user": None},
        initialization={
            "workspace": f"{rel}/initial_workspace" if t.has_initial_workspace else None,
            "process_command": f"python3 -m {t.module('preprocess')}",
        },
        stop={"user_phrases": ["#### STOP"], "tool_names": ["local-claim_done"]},
        # Phase split: the agent phase has no evaluator or groundtruth (re-resolved at eval).
        evaluation={"groundtruth_workspace": None, "evaluation_command": None},
    )


def _infra(env: InstanceEnv, exc: InfraError, stage: str) -> None:
    atomic_write_json(
        env.inst_dir / m.INFRA_RECORD,
        m.InfraRecord(
            instance_id=env.task.instance_id, reason_code=exc.reason_code, stage=stage,
            message=str(exc)[:2000], at=now_iso(),
        ),
    )  # fmt: skip


@dataclass(frozen=True)
class _AgentRequest:
    """What the agent phase hands the agent and records: the launch, the task, the prompt."""

    launch: datetime
    launch_time: str  # preprocess's --launch_time and the summary's
    task_text: str
    system_prompt: str


@dataclass
class _AgentRun:
    """What the agent phase has found so far: the summary's fields, filled in step by step."""

    status: m.BenchStatus = "failed"
    reason: str | None = None
    infra_reason: str | None = None
    error: str | None = None
    outcome: AgentOutcome | None = None
    pre_rc: int | None = None
    locked: bool = False  # the sidecar is in its agent phase (the checker's role locked out)

    def infra(self, exc: InfraError) -> None:
        self.infra_reason, self.reason, self.error = exc.reason_code, exc.reason_code, str(exc)


@dataclass
class AgentPhase:
    """One agent phase, step by step (:func:`open_agent_phase`, :meth:`run_step`,
    :meth:`close`): the runner's trial runs the agent between ``open`` and ``close``
    (:mod:`.steps`), :func:`run_agent_phase` runs a Cowork agent step there."""

    env: InstanceEnv
    req: _AgentRequest
    agent_name: str = ""
    container: Sandbox | None = None
    run: _AgentRun = field(default_factory=_AgentRun)
    inventory: McpInventory | None = None
    started_at: str = field(default_factory=now_iso)
    t0: float = field(default_factory=time.monotonic)
    summary: m.AgentSummary | None = None

    @property
    def ready(self) -> bool:
        """The task is set up (preprocess, servers): the agent may run."""
        return self.container is not None and self.run.locked and self.run.infra_reason is None

    def fail(self, exc: InfraError, stage: str) -> None:
        """An infrastructure failure of the phase: on the summary and in ``infra.json``."""
        self.run.infra(exc)
        _infra(self.env, exc, stage)

    def run_step(self, agent: AgentStep, timeout_sec: float) -> None:
        """A Cowork agent step (nop, oracle, script) in the ready container."""
        assert self.container is not None
        t1 = time.monotonic()
        ctx = AgentContext(self.env, self.container, self.req.task_text,
                           self.req.system_prompt, t1 + timeout_sec, mcp=self.inventory)
        try:
            self.record(agent(ctx))
        except InfraError as exc:
            self.run.infra(exc)
        except Exception as exc:  # the adapter itself broke: not the model's fault
            self.run.infra_reason, self.run.reason = "adapter_crashed", "adapter_crashed"
            self.run.error = f"{type(exc).__name__}: {exc}"
        self.env.timings["agent_s"] = time.monotonic() - t1

    def record(self, outcome: AgentOutcome) -> None:
        """The agent's outcome as the phase's status."""
        self.run.outcome = outcome
        self.run.status, self.run.reason = outcome.status, outcome.reason_code
        if outcome.infra_failed:
            self.run.infra_reason = self.run.reason or "agent_infra_failed"

    def close(self) -> m.AgentSummary:
        """Copy-out, the container removed (verified), the checker's role back, the
        records written (once: a second close returns the same summary)."""
        if self.summary is not None:
            return self.summary
        run, container = self.run, self.container
        try:
            if container is not None:
                _copy_out(self.env, container, run)
        except InfraError as exc:
            self.fail(exc, "agent_phase")
        finally:
            try:
                if container is not None:
                    container.remove()  # verified: raises unless the listing shows it gone
            finally:
                if run.locked:  # the agent's processes are gone: the checker may log in
                    self.env.sidecar.leave_agent_phase()
        self.summary = _write_agent_records(self.env, self.agent_name, self.req, run,
                                            self.started_at, self.t0)
        return self.summary


def open_agent_phase(env: InstanceEnv, agent_name: str,
                     launch: datetime | None = None) -> AgentPhase:
    """The agent container, the task's initial workspace and preprocess, its MCP servers,
    the sidecar in its agent phase; a failure is on the phase (:attr:`AgentPhase.ready`
    False), never raised, so :meth:`AgentPhase.close` still copies out and records."""
    env.inst_dir.mkdir(parents=True, exist_ok=True)
    ph = AgentPhase(env, _agent_request(env, launch or datetime.now(UTC)),
                    agent_name=agent_name)
    ph.container = _start(env, "agent", sanitised=True, runtime=env.sandbox_runtime)
    try:
        if not _preprocess(env, ph.container, ph.req, ph.run):
            return ph
        ph.run.locked = True
        env.sidecar.enter_agent_phase()
        try:
            ph.inventory = start_task_servers(env, ph.container)
        except InfraError as exc:  # copy-out still runs: the servers' stderr
            ph.fail(exc, "mcp_servers")
    except InfraError as exc:
        ph.fail(exc, "agent_phase")
    except BaseException:
        ph.close()
        raise
    return ph


def run_agent_phase(
    env: InstanceEnv,
    agent: AgentStep,
    agent_name: str,
    *,
    timeout_sec: float = 1800,
    launch: datetime | None = None,
) -> m.AgentSummary:
    """Preprocess, the agent step, copy-out; writes traj_log.json and agent_summary.json."""
    ph = open_agent_phase(env, agent_name, launch)
    try:
        if ph.ready:
            ph.run_step(agent, timeout_sec)
    finally:
        summary = ph.close()
    return summary


def _agent_request(env: InstanceEnv, launch: datetime) -> _AgentRequest:
    docs = env.docs or read_docs(env.bench_root, env.task.instance_id)
    return _AgentRequest(
        launch=launch, launch_time=launch.strftime("%Y-%m-%d %H:%M:%S"),
        task_text=docs.task, system_prompt=render_prompt(docs.system_prompt),
    )  # fmt: skip


def _preprocess(env: InstanceEnv, container: Sandbox, req: _AgentRequest, run: _AgentRun) -> bool:
    """The task's initial workspace and its preprocess, as the agent; False if it failed."""
    if env.task.has_initial_workspace:
        initial = task_dir(env.bench_root, env.task.instance_id) / "initial_workspace"
        data = pack_tree([(p, p.name) for p in sorted(initial.iterdir())],
                         uid=AGENT_ID, gid=AGENT_ID)  # fmt: skip
        container.put_archive(WORKSPACE, data)
    pre = container.exec(
        ["python3", "-m", env.task.module("preprocess"), "--agent_workspace", WORKSPACE,
         "--launch_time", req.launch_time],
        env=env.env, workdir=ROOT, timeout=600, user=AGENT,
    )  # fmt: skip
    run.pre_rc = pre.exit_status
    atomic_write_text(env.inst_dir / m.PREPROCESS_LOG, pre.stdout_text + pre.stderr_text)
    env.timings["preprocess_s"] = pre.wall_s
    if pre.exit_status != 0:
        run.infra_reason, run.reason = "preprocess_failed", "preprocess_failed"
        return False
    return True


def _copy_out(env: InstanceEnv, container: Sandbox, run: _AgentRun) -> None:
    """The workspace, the agent's logs and the MCP servers' logs, out of the container,
    every process in it frozen first: nothing the agent left running changes a file while
    the daemon streams it (a file that shrinks mid-copy would break the archive, and the
    agent's doing would read as infrastructure)."""
    logs = bool(env.task.servers) and has_logs(container)  # an exec: before the freeze
    frozen = freeze(container)
    try:
        container.copy_out(WORKSPACE, env.inst_dir / m.WORKSPACE_DIR)  # bounded, inert
        container.copy_out(AGENT_LOGS, env.inst_dir / m.AGENT_LOG_DIR)
        if logs:  # agent-writable too (the supervisor runs as the agent)
            container.copy_out(MCP_DIR, env.inst_dir / LOG_DIR_NAME)
    except CopyRefused as exc:  # the agent's output broke a copy-out cap: its failure
        run.status, run.reason, run.error = "failed", exc.reason_code, str(exc)
    finally:
        if frozen:  # thawed for the removal (gVisor cannot kill a paused container)
            thaw(container)


def freeze(container: Sandbox) -> bool:
    """Pause every process of the container (the cgroup freezer; the removal that follows
    kills them). False when the engine or runtime cannot pause: the copy runs anyway."""
    from docker.errors import DockerException

    try:
        container.api.pause(container.id)
    except DockerException:  # a runtime without pause: no worse than before
        return False
    return True


def thaw(container: Sandbox) -> None:
    """Undo :func:`freeze` (best effort: the removal after it reports what is left)."""
    from docker.errors import DockerException

    with contextlib.suppress(DockerException):
        container.api.unpause(container.id)


def _write_agent_records(
    env: InstanceEnv,
    agent_name: str,
    req: _AgentRequest,
    run: _AgentRun,
    started_at: str,
    t0: float,
) -> m.AgentSummary:
    """workspace_sanitised.json, traj_log.json, traj.json and agent_summary.json."""
    if (env.inst_dir / m.WORKSPACE_DIR).is_dir():
        atomic_write_json(env.inst_dir / SANITISED_NAME,
                          sanitise_workspace(env.inst_dir / m.WORKSPACE_DIR))  # fmt: skip
    state: Literal["absent"] = "absent"
    finished_at = now_iso()
    config = traj_config(
        env, req.launch.strftime("%Y-%m-%d %H:%M:%S %A"), req.system_prompt, req.task_text
    )
    atomic_write_json(env.inst_dir / m.TRAJ_LOG, m.TrajLog(
        config=config, status=run.status, start_time=started_at, end_time=finished_at))  # fmt: skip
    outcome = run.outcome
    atomic_write_json(env.inst_dir / m.TRAJ, m.Traj(
        status=run.status, start_time=started_at, end_time=finished_at,
        messages=outcome.messages if outcome else [],
        tool_calls=outcome.tool_calls if outcome else [],
    ))  # fmt: skip
    summary = m.AgentSummary(
        instance_id=env.task.instance_id, agent=agent_name, bench_status=run.status,
        reason_code=run.reason, infra_failed=run.infra_reason is not None,
        infra_reason=run.infra_reason, launch_time=req.launch_time, started_at=started_at,
        finished_at=finished_at, preprocess_exit_code=run.pre_rc, agent_container_state=state,
        durations={"agent_phase_s": time.monotonic() - t0}, error=run.error,
    )  # fmt: skip
    atomic_write_json(env.inst_dir / m.AGENT_SUMMARY, summary)
    return summary


def start_task_servers(env: InstanceEnv, container: Sandbox) -> McpInventory | None:
    """The task's MCP servers as persistent sessions (:mod:`.mcp_servers`); the inventory
    goes to ``mcp_servers.json``. A server that cannot start is ``InfraError``
    ``mcp_unavailable`` (never a scored failure) unless ``allow_missing_tools``."""
    if not env.task.servers:
        return None
    plan = plan_servers(env.bench_root, env.task, WORKSPACE, env.local_servers)
    with phase_deadline("provision", env.deadlines.get("provision")):  # a server that hangs
        inventory = start_servers(container, plan, env.task.instance_id, env.agent_env)
    atomic_write_json(env.inst_dir / INVENTORY_NAME, inventory)
    atomic_write_json(env.inst_dir / OUTSIDE_CONFIG_NAME, inventory.client_config_outside)
    env.timings["mcp_start_s"] = inventory.started_s
    if not inventory.ready and not env.allow_missing_tools:
        raise InfraError(inventory.problem()[:2000], "mcp_unavailable")
    return inventory


def container_checker(
    env: InstanceEnv, timeout_sec: float = 900
) -> Callable[[CheckerRequest], CheckerRun]:
    """The checker runner of the eval phase: a fresh eval container with the full task tree."""

    def run(req: CheckerRequest) -> CheckerRun:
        container = _start(env, f"eval-{req.attempt_id[:8]}", sanitised=False)
        try:
            ws = Path(req.workspace)
            if ws.is_dir() and not ws.is_symlink():
                with pack_workspace(ws) as data:  # no host link followed, none leaving it
                    container.put_archive(WORKSPACE, data)
            gt = f"{ROOT}/tasks/finalpool/{req.instance_id}/groundtruth_workspace"
            res = container.exec(
                ["python3", "-m", req.module, "--res_log_file", f"{SCRATCH}/res_log.json",
                 "--agent_workspace", WORKSPACE,
                 "--groundtruth_workspace", gt if req.has_groundtruth_dir else "None",
                 "--launch_time", req.launch_time],
                env=env.env, workdir=ROOT, timeout=timeout_sec,
            )  # fmt: skip
            scratch = Path(req.scratch_dir)
            container.copy_out(SCRATCH, scratch)
            out, err = res.stdout_text, res.stderr_text
            atomic_write_text(scratch / "checker.log", out + "\n--- stderr ---\n" + err)
            res_log = scratch / "res_log.json"
            return CheckerRun(
                exit_code=res.exit_status, stdout=out, stderr=err,
                res_log_path=str(res_log) if res_log.exists() else None,
            )  # fmt: skip
        finally:
            container.remove()

    return run
