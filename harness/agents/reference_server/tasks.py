"""Tasks of the reference agent server: admission, the scripted run, the result envelope.

A task goes ``scheduled`` -> ``running`` -> one of ``completed``/``failed``/``cancelled``
(``cancel_requested`` while a cancel settles). Its plan's steps run in the executor named
by ``executor_ref`` (an ``mcp`` step is a tool call the server makes itself, an MCP client
over HTTP: exit code 0 when the tool answered, 1 otherwise); cost, tokens and rounds add up
per step, like the real server reports them.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import threading
import time
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

from harness.agents.gateway.models import SETTLED_STATUSES, TaskCreateRequest
from harness.agents.reference_server.config import (
    McpStep,
    PlanStep,
    ReferencePlan,
    ReferenceServerConfig,
)
from harness.agents.reference_server.execution import (
    OUTPUT_TAIL,
    DockerExecExecutor,
    ExecutorUnavailable,
    HostWorkspaceExecutor,
    LocalExecutor,
    StepExecutor,
    StepRun,
)
from harness.agents.reference_server.host_files import HostFileRefused
from harness.agents.reference_server.mcp_client import (
    McpCallFailed,
    call_tool,
    result_text,
    server_urls,
)

log = logging.getLogger("harness.agents.reference_server.server")

ACTIVE = frozenset({"scheduled", "running", "cancel_requested"})


class Admission(Exception):
    """A submit the server refuses: HTTP ``status`` with a JSON ``body``."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(body.get("error", ""))
        self.status = status
        self.body = body


class RefTask:
    def __init__(self, task_id: str, request: TaskCreateRequest, plan: ReferencePlan) -> None:
        self.task_id = task_id
        self.request = request
        self.plan = plan
        self.status = "scheduled"
        self.reason_code: str | None = None
        self.error: str | None = None
        self.result: str | None = None
        self.execution_status: str | None = None
        self.execution_reason_code: str | None = None
        self.resource_limit: str | None = None
        self.degraded = False
        self.degraded_reason: str | None = None
        self.cost_usd = 0.0
        self.cost_known = True
        self.cost_final = False
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.rounds = 0
        self.steps: list[dict[str, Any]] = []
        # The task's event log (``GET /api/tasks/{id}/events``): status changes, each step's
        # model usage (``llm_usage``) and its result, in order.
        self.events: list[dict[str, Any]] = []
        self.created_at = time.time()
        self.updated_at = self.created_at
        self.stop = threading.Event()
        self.deadline = _deadline(request, self.created_at)

    def envelope(self) -> dict[str, Any]:
        settled = self.status in SETTLED_STATUSES
        execution = self.execution_status or self.status
        return {
            "task_id": self.task_id,
            "status": self.status,
            "reason_code": self.reason_code,
            "result": self.result,
            "final_answer": self.plan.final_answer if settled else None,
            "error": self.error,
            "outcome_axes": {
                "lifecycle": {"status": self.status},
                "execution": {
                    "status": execution,
                    "reason_code": self.execution_reason_code or self.reason_code,
                },
                "artifacts": {
                    "status": "ready"
                    if self.status == "completed"
                    else "pending"
                    if not settled
                    else "missing"
                },
            },
            "loop_outcome": {"resource_limit": self.resource_limit},
            "degraded": self.degraded,
            "degraded_reason": self.degraded_reason,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_rounds": self.rounds,
            "accounted_upper_bound_usd": round(self.cost_usd, 6),
            "accounted_upper_bound_usd_with_children": round(self.cost_usd, 6),
            "cost_known": self.cost_known,
            "cost_final": self.cost_final,
            "cost_with_children_partial": False,
            "unknown_unmetered": not self.cost_known,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "steps": self.steps,
        }


def _deadline(request: TaskCreateRequest, created: float) -> float | None:
    if request.deadline_at is not None:
        return request.deadline_at.timestamp()
    timeout = request.timeout_sec or request.timeout
    return created + timeout if timeout else None


def _overlaps(a: str, b: str) -> bool:
    pa, pb = PurePosixPath(a), PurePosixPath(b)
    return pa == pb or pa in pb.parents or pb in pa.parents


class TaskStore:
    def __init__(self, config: ReferenceServerConfig) -> None:
        self.counters: dict[str, int] = {}
        self.config = config
        self.started_at = time.monotonic()
        self.tasks: dict[str, RefTask] = {}
        self.submit_attempts = 0
        self.submissions = 0
        self.cancels: list[str] = []
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    # -- admission -----------------------------------------------------------------------

    def ready(self) -> bool:
        return time.monotonic() - self.started_at >= self.config.starting_s

    def submit(self, request: TaskCreateRequest) -> RefTask:
        cfg = self.config
        with self._lock:
            self.submit_attempts += 1
            if not self.ready() or self.submit_attempts <= cfg.starting_posts:
                raise Admission(
                    503,
                    {
                        "ok": False,
                        "status": "rejected",
                        "reason_code": "worker_pool_unavailable",
                        "error": "supervisor is starting",
                    },
                )
            if request.type not in cfg.allowed_types:
                raise Admission(
                    400,
                    {
                        "ok": False,
                        "error": f"task type {request.type!r} is internal and cannot be submitted",
                    },
                )
            ref = request.executor_ref
            for root in cfg.protected_roots:
                for host in ref.host_roots() if ref else []:
                    if _overlaps(host, root):
                        raise Admission(
                            400,
                            {
                                "ok": False,
                                "error": "executor_ref mapping "
                                "overlaps the server's own repository or data",
                            },
                        )
            task_id = request.task_id or f"t-{uuid.uuid4().hex[:12]}"
            if task_id in self.tasks or task_id in cfg.preexisting_task_ids:
                raise Admission(
                    409,
                    {
                        "ok": False,
                        "status": "rejected",
                        "task_id": task_id,
                        "admission": {"reason_code": "duplicate_task_id"},
                        "error": "task id already exists",
                    },
                )
            plan = self._plan(request)
            task = RefTask(task_id, request, plan)
            self.tasks[task_id] = task
            self.submissions += 1
        thread = threading.Thread(
            target=self._run, args=(task,), daemon=True, name=f"task-{task_id}"
        )
        self._threads.append(thread)
        thread.start()
        return task

    def _plan(self, request: TaskCreateRequest) -> ReferencePlan:
        raw = request.metadata.get("reference_plan")
        if raw is None:  # the Nth submission's own plan, when the config lists one
            plans = self.config.plans
            return plans[self.submissions] if self.submissions < len(plans) \
                else self.config.default_plan
        try:
            return ReferencePlan.model_validate(raw)
        except ValueError as exc:
            raise Admission(
                400,
                {
                    "ok": False,
                    "error": f"metadata.reference_plan is invalid: {exc.__class__.__name__}",
                },
            ) from exc

    def envelope(self, task_id: str) -> dict[str, Any] | None:
        with self._lock:
            task = self.tasks.get(task_id)
            return task.envelope() if task is not None else None

    def cancel(self, task_id: str) -> bool:
        with self._lock:
            task = self.tasks.get(task_id)
            if task is None or task.status not in ACTIVE:
                return False
            self.cancels.append(task_id)
            if task.status != "cancel_requested":
                task.status = "cancel_requested"
                task.updated_at = time.time()
            task.stop.set()
            return True

    def count(self, name: str) -> None:
        """One more of a counter ``/api/state`` reports (e.g. ``settings_reads``)."""
        with self._lock:
            self.counters[name] = self.counters.get(name, 0) + 1

    def state(self) -> dict[str, Any]:
        with self._lock:
            return {
                **self.counters,
                "supervisor_ready": self.ready(),
                "submit_attempts": self.submit_attempts,
                "submissions": self.submissions,
                "cancels": list(self.cancels),
                "tasks": {t: task.status for t, task in self.tasks.items()},
            }

    def shutdown(self, grace_s: float = 5.0) -> None:
        with self._lock:
            for task in self.tasks.values():
                task.stop.set()
        for thread in self._threads:
            thread.join(grace_s)

    # -- the scripted run ----------------------------------------------------------------

    def _set(self, task: RefTask, **fields: Any) -> None:
        with self._lock:
            if "status" in fields and fields["status"] != task.status:
                self._event(task, "status", status=fields["status"],
                            reason_code=fields.get("reason_code"))
            for key, value in fields.items():
                setattr(task, key, value)
            task.updated_at = time.time()

    def _event(self, task: RefTask, kind: str, **fields: Any) -> None:
        """Append one event (the caller holds the lock)."""
        task.events.append({"seq": len(task.events), "ts": time.time(), "type": kind, **fields})

    def events(self, task_id: str, cursor: int, limit: int) -> dict[str, Any] | None:
        """Events from ``cursor`` on (at most ``limit``) and the next cursor; None if unknown."""
        with self._lock:
            task = self.tasks.get(task_id)
            if task is None:
                return None
            chunk = task.events[cursor:cursor + limit]
            return {"task_id": task_id, "events": chunk, "cursor": cursor + len(chunk)}

    def _executor(self, task: RefTask) -> StepExecutor:
        ref = task.request.executor_ref
        if ref is not None and ref.type == "docker_exec":
            assert ref.container_name is not None
            user = ref.user or self.config.docker_user
            if ref.workspace_host_path:  # files through the host path, as the spec's server
                denied = [p for a in task.request.resource_policy.protected_artifacts
                          if "read_bytes" in a.deny for p in a.paths] \
                    if task.request.resource_policy else []
                return HostWorkspaceExecutor(ref.container_name, ref.workspace_backend_path,
                                             user, ref.workspace_host_path, denied)
            return DockerExecExecutor(ref.container_name, ref.workspace_backend_path, user)
        workspace = (ref.workspace_host_path if ref else None) or task.request.workspace_root
        if workspace is None:
            scratch = self.config.scratch_dir or tempfile.gettempdir()
            workspace = str(Path(scratch) / f"harness-ref-{task.task_id}")
        return LocalExecutor(Path(workspace))

    def _run(self, task: RefTask) -> None:
        try:
            self._run_plan(task)
        except Exception as exc:  # the server must settle every task
            log.exception("task %s crashed", task.task_id)
            self._settle(
                task,
                "failed",
                "internal_error",
                error=type(exc).__name__,
                execution_status="infra_failed",
            )

    def _run_plan(self, task: RefTask) -> None:
        plan = task.plan
        if task.stop.wait(plan.schedule_delay_s):
            return self._settle(task, "cancelled", "cancelled")
        self._set(task, status="running", error=plan.progress_error)
        if self.config.never_settle:
            task.stop.wait()
            return self._settle(task, "cancelled", "cancelled")
        try:
            executor = self._executor(task)
        except ExecutorUnavailable as exc:
            return self._settle(
                task,
                "failed",
                "executor_unavailable",
                error=str(exc),
                execution_status="infra_failed",
            )
        try:
            for index, step in enumerate(plan.steps):
                remaining = (task.deadline - time.time()) if task.deadline else None
                if remaining is not None and remaining <= 0:
                    return self._settle(
                        task, "completed", "deadline_local", resource_limit="deadline"
                    )
                if step.sleep_s and task.stop.wait(min(step.sleep_s, remaining or step.sleep_s)):
                    return self._settle(task, "cancelled", "cancelled")
                timeout = step.timeout_s or self.config.default_step_timeout_s
                if remaining is not None:
                    timeout = min(timeout, max(remaining, 0.01))
                record, run = self._act(task, executor, step, index, timeout)
                self._account(task, step, index, record)
                if task.stop.is_set():
                    return self._settle(task, "cancelled", "cancelled")
                if run is not None and run.timed_out:
                    if task.deadline and time.time() >= task.deadline - 0.05:
                        return self._settle(
                            task, "completed", "deadline_local", resource_limit="deadline"
                        )
                    if not step.continue_on_error:
                        return self._settle(
                            task, "failed", "step_timeout", error=f"step {index} timed out"
                        )
                elif run is not None and run.exit_code != 0 and not step.continue_on_error:
                    return self._settle(
                        task, "failed", "step_failed", error=f"step {index} exited {run.exit_code}"
                    )
        finally:
            executor.close()
        if self.config.infra_failure:
            return self._settle(
                task,
                "failed",
                self.config.infra_failure,
                error="provider call failed",
                execution_status="infra_failed",
            )
        return self._settle(
            task,
            plan.status,
            plan.reason_code,
            result=plan.result,
            execution_status=plan.execution_status,
            execution_reason_code=plan.execution_reason_code,
            degraded=plan.degraded,
            degraded_reason=plan.degraded_reason,
            resource_limit=plan.resource_limit,
            cost_final=plan.cost_final,
        )

    def _act(self, task: RefTask, executor: StepExecutor, step: PlanStep, index: int,
             timeout: float) -> tuple[dict[str, Any], StepRun | None]:
        """What one step does (files, an MCP call, a command): its record and its run."""
        record: dict[str, Any] = {"index": index}
        if step.write is not None:
            self._file_step(record, "wrote", step.write.path,
                            lambda w=step.write: executor.write(w))
        if step.read is not None:
            self._file_step(record, "read", step.read, lambda r=step.read: executor.read(r))
        run = None
        if step.mcp is not None:
            run = self._mcp(task, step.mcp, timeout)
            record.update(mcp=f"{step.mcp.server}.{step.mcp.tool}",
                          exit_code=run.exit_code, output_tail=run.output_tail)
        if step.run is not None:
            run = executor.run(step.run, timeout_s=timeout, env=step.env, stop=task.stop)
            record.update(exit_code=run.exit_code, duration_s=round(run.duration_s, 3),
                          timed_out=run.timed_out, output_tail=run.output_tail)
        return record, run

    def _account(self, task: RefTask, step: PlanStep, index: int,
                 record: dict[str, Any]) -> None:
        """A finished step: its events, its cost and tokens on the task."""
        with self._lock:
            if step.prompt_tokens or step.completion_tokens or step.cost_usd:
                self._event(task, "llm_usage", round=index, prompt_tokens=step.prompt_tokens,
                            completion_tokens=step.completion_tokens, cost_usd=step.cost_usd)
            self._event(task, "step", **record)
            task.rounds += 1
            task.cost_usd += step.cost_usd
            task.cost_known = task.cost_known and step.cost_known
            task.prompt_tokens += step.prompt_tokens
            task.completion_tokens += step.completion_tokens
            task.steps.append(record)
            task.updated_at = time.time()

    @staticmethod
    def _file_step(record: dict[str, Any], key: str, path: str, act: Any) -> None:
        """A file tool: its result in the step's record; a refusal is recorded (its reason
        code), and the task goes on, as a real server's tool error would let it."""
        try:
            data = act()
        except HostFileRefused as exc:
            record[key] = {"path": path, "refused": exc.reason, "error": str(exc)[:300]}
            return
        if isinstance(data, bytes):
            record[key] = {"path": path, "bytes": len(data),
                           "sha256": hashlib.sha256(data).hexdigest()}
        else:
            record[key] = path

    def _mcp(self, task: RefTask, step: McpStep, timeout_s: float) -> StepRun:
        """The plan's tool call, by this server (exit code 0: the tool answered; 1: it
        reported an error, the server is not in the body, or it could not be reached)."""
        started = time.monotonic()
        url = server_urls(task.request.metadata).get(step.server)
        if url is None:
            text, code = f"no MCP server {step.server!r} in metadata.mcp_http_urls", 1
        else:
            try:
                result = call_tool(url, step.tool, step.arguments, timeout_s=timeout_s)
                text, code = result_text(result), 1 if result.get("isError") else 0
            except McpCallFailed as exc:
                text, code = f"MCP call failed: {exc}", 1
        return StepRun(exit_code=code, output_tail=text[-OUTPUT_TAIL:],
                       duration_s=time.monotonic() - started)  # fmt: skip

    def _settle(self, task: RefTask, status: str, reason_code: str | None, **fields: Any) -> None:
        fields.setdefault("cost_final", True)
        fields.setdefault("error", None)
        self._set(task, status=status, reason_code=reason_code, **fields)
        log.info("task %s settled: %s (%s)", task.task_id, status, reason_code)
