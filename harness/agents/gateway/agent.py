"""The ``gateway`` agent: one task on the agent server per instance.

It builds the task it submits from the neutral request (:func:`own_body`; a test or a tool
may give a whole body instead, ``AgentRequest.task_body``); it fills in the
timeout when the body has none and, for a ``docker_exec`` executor, the unprivileged user
its steps run as (``executor_ref.user``: the sandbox's user, else ``agent``; never root),
reattaches or submits, waits, and classifies the settled result. A client-side give-up
(timeout, lasting poll errors) is an infra outcome; the task is cancelled then unless the
adapter keeps its sandbox for a reattach (``extra["keep_sandbox"]``, or ``extra["reattach"]``
for a sandbox adopted on resume: :mod:`harness.sandbox.reattach`), since otherwise its
sandbox ends with the instance. An interrupt cancels the task first. A resume first settles the tasks
earlier attempts left running (:mod:`harness.agents.gateway.orphans`). An adapter whose task
serves tools on its internal network asks for a route to them (``extra["tool_route"]``):
the server outside that network reaches them through a per-task token proxy on the host's
loopback (:mod:`harness.agents.gateway.tool_route`), open while the task runs.

Its hooks around each run: :meth:`GatewayAgent.before_run` brings the ancestor's checkpoint
for a reattach, or else names the earlier attempts' checkpoints whose tasks it must settle
first (``extra["ancestor_checkpoints"]``); :meth:`GatewayAgent.after_run` records what the
agent folder proves about the task's spend (``details.paid_evidence``), also when the run
was interrupted or given up.

The row's ``models`` are the task's ``llm_usage`` events per model (source
``gateway_server``, :func:`harness.agents.gateway.events.add_usage`), each ``allowed`` when
it is ``--solve-model`` or an ``--allow-model`` (every model when none is declared).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from harness.agents.base import (
    Agent,
    AgentOptions,
    AgentOutcome,
    AgentRequest,
    InstanceView,
    RuntimeOutcome,
    SandboxKeeper,
    register_agent,
)
from harness.agents.gateway.body import task_for
from harness.agents.gateway.checkpoint import AgentFolder, carry_checkpoint, new_task_id
from harness.agents.gateway.classify import classify_result
from harness.agents.gateway.client import (
    ClientPollError,
    ClientPollTimeout,
    GatewayClient,
    PollPolicy,
)
from harness.agents.gateway.events import models_called
from harness.agents.gateway.models import TaskCreateRequest, is_root_user
from harness.agents.gateway.orphans import (
    orphan_checkpoints,
    orphans_cost,
    record_paid_evidence,
    settle_orphans,
)
from harness.agents.gateway.reattach import (
    adopt_kept_sandbox,
    keep_after_give_up,
    reattach_labels,
)
from harness.agents.gateway.run import run_task, validate_task_body
from harness.agents.gateway.tool_route import RouteRequest, route_urls
from harness.agents.gateway.tool_route import open_for as open_route
from harness.core.errors import InfraError
from harness.core.fsutil import atomic_write_json
from harness.model_proxy.pinning import ModelPin, pin_for
from harness.run.secrets import secrets_from_env

if TYPE_CHECKING:
    from harness.sandbox import container
    from harness.sandbox.protocol import Sandbox

ROUTE_NAME = "tool_route.json"  # in the agent's folder: the route, never its token
AGENT_USER = "agent"  # harness.sandbox.images.build.AGENT_USER (uid 1000) in every harness image


def agent_user(sandbox: Sandbox | None) -> str:
    """The user the agent server's ``docker exec`` steps run as: the sandbox's default exec
    user when it is not root, else the images' unprivileged ``agent``. Root is what the
    sandbox's kernel says (uid or gid 0 for that user, :func:`is_root_in`), not only how
    the name is spelled: a name the image maps to uid 0 runs as ``agent`` too."""
    if sandbox is None or not sandbox.user or is_root_user(sandbox.user):
        return AGENT_USER
    return AGENT_USER if is_root_in(sandbox, sandbox.user) else sandbox.user


def is_root_in(sandbox: Sandbox, user: str) -> bool:
    """Whether ``user`` has uid 0 or gid 0 in the sandbox (``id``, run as that user); a
    sandbox that cannot answer is taken as root."""
    try:
        res = sandbox.exec(["id"], user=user, timeout=30, workdir="/")
    except InfraError:
        return True
    found = re.search(rb"uid=(\d+)\D.*?gid=(\d+)", res.stdout) if res.exit_code == 0 else None
    return found is None or 0 in (int(found.group(1)), int(found.group(2)))


class GatewayAgent(Agent):
    kind = "gateway"
    remote_server = True  # the agent server at --gateway-url runs the task
    reattaches = True  # a task outlives its run in its sandbox (harness.agents.gateway.reattach)
    relays = ("tool_route",)  # its route to a benchmark's tools (tool_route)

    def __init__(
        self, base_url: str, *, policy: PollPolicy | None = None, adapter: str | None = None,
        limit_usd: float | None = None, pin: ModelPin | None = None,
    ) -> None:
        self.base_url = base_url
        self.policy = policy or PollPolicy()
        self.adapter = adapter
        self.limit_usd = limit_usd  # --per-task-limit-usd: the task is cancelled there
        self.pin = pin  # --solve-model/--allow-model: the row's models say which were others

    @classmethod
    def from_options(cls, options: AgentOptions) -> GatewayAgent:
        if not options.gateway_url:
            raise ValueError("the gateway agent needs the agent server's URL (--gateway-url)")
        updates: dict[str, Any] = {}
        if options.poll_interval_s is not None:
            updates["interval_s"] = options.poll_interval_s
        if options.client_grace_s is not None:
            updates["client_grace_s"] = options.client_grace_s
        return cls(options.gateway_url, policy=PollPolicy(**updates), adapter=options.adapter,
                   limit_usd=options.per_task_limit_usd,
                   pin=pin_for(options.solve_model, options.allow_models))

    @classmethod
    def task_preview(cls, request: AgentRequest) -> TaskCreateRequest:
        """The task a dry run shows: as it would be submitted, in ``<sandbox>`` when the
        request has none yet."""
        task_id = new_task_id(f"{request.adapter}-{request.instance_id}")
        return cls._body(replace(request, task_body=task_for(request, task_id)))

    @staticmethod
    def _body(request: AgentRequest) -> TaskCreateRequest:
        body = request.task_body if request.task_body is not None else own_body(request)
        data = (
            body.model_dump(mode="json", exclude_none=True)
            if isinstance(body, BaseModel)
            else dict(body)
        )
        if request.timeout_sec and not any(
            data.get(k) for k in ("timeout_sec", "timeout", "deadline_at")
        ):
            data["timeout_sec"] = request.timeout_sec
        ref = data.get("executor_ref")
        if isinstance(ref, dict) and ref.get("type") == "docker_exec" and not ref.get("user"):
            data["executor_ref"] = {**ref, "user": agent_user(request.sandbox)}
        return validate_task_body(data)

    def before_run(self, view: InstanceView, request: AgentRequest) -> AgentRequest:
        folder = AgentFolder.of(view.instance_dir, request.instance_dir)
        if request.extra.get("reattach"):
            # Only with the sandbox the task works in (adopted: harness.sandbox.reattach) or
            # a workspace outliving the run: a fresh sandbox cannot hold what an earlier task
            # produced, so reattaching would be wrong.
            carry_checkpoint(folder, view.details, benchmark=view.benchmark,
                             instance_id=view.instance_id, ancestors=view.ancestors,
                             source=request.extra.get("reattach_checkpoint"))
            return request
        # earlier attempts' tasks are cancelled before a fresh one is submitted
        found = orphan_checkpoints(folder, benchmark=view.benchmark,
                                   instance_id=view.instance_id, ancestors=view.ancestors)
        return replace(request, extra={**request.extra, "ancestor_checkpoints": found})

    def after_run(self, view: InstanceView, request: AgentRequest,
                  outcome: AgentOutcome | None) -> None:
        folder = AgentFolder.of(view.instance_dir, request.instance_dir)
        record_paid_evidence(folder, view.details, view.output)

    def sandbox_labels(self) -> dict[str, str]:
        return reattach_labels(self)

    def adopt_sandbox(self, view: InstanceView, keeper: SandboxKeeper
                      ) -> tuple[container.Sandbox, dict[str, Any]] | None:
        return adopt_kept_sandbox(view, self, keeper)

    def keep_sandbox(self, view: InstanceView, keeper: SandboxKeeper,
                     sandbox: container.Sandbox) -> bool:
        return keep_after_give_up(view, keeper, sandbox)

    def run(self, request: AgentRequest) -> AgentOutcome:
        """The task, with the adapter's tool route open while it runs (when one is asked:
        ``extra["tool_route"]``, :mod:`harness.agents.gateway.tool_route`): its URLs go in
        the body's metadata, its record to ``tool_route.json`` and ``details.tool_route``."""
        raw = request.extra.get("tool_route")
        if not raw or request.sandbox is None:
            return self._run(request)
        wanted = RouteRequest.model_validate(raw)
        route = open_route(request.sandbox, wanted)
        record = route.record
        try:
            body = self._body(request)
            body.metadata[wanted.metadata_key] = route_urls(route, wanted)
            outcome = self._run(replace(request, task_body=body))
        finally:
            record = route.close()
            path = Path(request.instance_dir) / ROUTE_NAME
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(path, record)
        summary = {"kind": record.kind, "paths": record.paths, "forwarded": record.forwarded,
                   "refused": record.refused}  # fmt: skip
        return outcome.model_copy(update={
            "details": {**outcome.details, "tool_route": summary},
            "output_paths": {**outcome.output_paths, "tool_route": str(path)}})  # fmt: skip

    def _run(self, request: AgentRequest) -> AgentOutcome:
        instance_dir = Path(request.instance_dir)  # the agent's folder (AgentFolder)
        adapter = self.adapter or request.adapter
        body = self._body(request)
        orphan_details: dict[str, Any] = {}
        with GatewayClient(self.base_url, policy=self.policy) as client:
            # A resume that cannot reattach first settles what earlier attempts left running.
            orphans = settle_orphans(client, request.extra.get("ancestor_checkpoints", ()))
            if orphans:
                orphan_details["orphan_tasks"] = orphans
            try:
                run = run_task(
                    client, body, instance_dir=instance_dir, adapter=adapter,
                    timeout_s=request.timeout_sec,
                    secrets=secrets_from_env(request.env_allowlist),
                    limit_usd=self.limit_usd,
                )
            except (ClientPollTimeout, ClientPollError) as exc:
                last = exc.last
                # Its sandbox ends with the instance unless the adapter keeps it for a
                # reattach (``keep_sandbox``, or ``reattach``: an adopted one): a task left
                # running in a removed sandbox would spend for nothing.
                reattachable = bool(request.extra.get("reattach")
                                    or request.extra.get("keep_sandbox"))
                cancelled = (not reattachable and exc.task_id is not None
                             and client.cancel(exc.task_id))
                return AgentOutcome(
                    agent=self.kind,
                    completed=False,
                    infra=True,
                    reason_code=exc.reason_code,
                    task_id=exc.task_id,
                    runtime_outcome=RuntimeOutcome(
                        available=last is not None, status=last.status if last else None
                    ),
                    output_paths={"task_checkpoint": str(AgentFolder(instance_dir).checkpoint)},
                    details={"reattachable": reattachable, "error": str(exc),
                             "cancelled_on_give_up": cancelled, **orphan_details},
                    earlier_cost_usd=orphans_cost(orphans),
                )
        outcome = classify_result(
            run.result, task_id=run.task_id, raw_result_path=run.result_path, agent=self.kind
        )
        paths = {"task_checkpoint": run.checkpoint_path, "task_result": run.result_path}
        if run.body_path:
            paths["task_body"] = run.body_path
        if run.events_path:
            paths["gateway_events"] = run.events_path
        details = {
            **outcome.details,
            "reattached": run.reattached,
            "reattach_reason": run.decision.reason,
            "polls": run.polls,
            "events": run.events,
            "gateway_url": self.base_url,
            **orphan_details,
            **({"per_task_limit_usd": self.limit_usd, "per_task_limit_reached": run.limit_reached}
               if run.limit_reached else {}),
        }
        return outcome.model_copy(update={"output_paths": paths, "details": details,
                                          "models": models_called(run.models, self.pin),
                                          "reattached": run.reattached,
                                          "earlier_cost_usd": orphans_cost(orphans)})


@register_agent("gateway", GatewayAgent)
def _make(options: AgentOptions) -> Agent:
    return GatewayAgent.from_options(options)


def own_body(request: AgentRequest) -> TaskCreateRequest:
    """The agent server's task built from the neutral request (every benchmark's: see
    :func:`harness.agents.gateway.body.task_for`), under a fresh task id per try."""
    if request.sandbox is None:
        raise InfraError(
            f"{request.adapter}: instance {request.instance_id} gives the gateway agent no "
            "sandbox to work in (the benchmark does not support --agent gateway)",
            "gateway_task_body_missing",
        )
    return task_for(request, new_task_id(f"{request.adapter}-{request.instance_id}"))
