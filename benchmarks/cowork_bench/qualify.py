"""``harness cowork qualify``: start each selected task's MCP servers, list their tools, and
say per task whether it is ready, or which server failed and why (before paying for a run).

    harness cowork qualify --cowork-root PATH [--task ID ...] [--output FILE]

One seeded PostgreSQL sidecar on one internal network serves the whole qualification (the
database-backed servers reach it with the agent's role, as in a run); each task gets its own
agent container (the run's image, user, limits and layout), its servers are started exactly
as a run starts them (:func:`benchmarks.cowork_bench.mcp_servers.start_servers`), inventoried,
and the container is removed. Every resource carries this qualification's run label and is
removed at the end (the listing proves it). No preprocess, no agent, no checker runs.

Exit status: 0 when every selected task is ready, 1 when some task is not, 2 on a usage
error or when the infrastructure (Docker, the sidecar) fails.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from benchmarks.cowork_bench.cli import doc_summary
from benchmarks.cowork_bench.containers import RunIdentity
from benchmarks.cowork_bench.images import ensure_image
from benchmarks.cowork_bench.mcp_servers import (
    McpInventory,
    McpPlan,
    ServerStatus,
    plan_servers,
    start_servers,
)
from benchmarks.cowork_bench.phases import WORKSPACE, InstanceEnv, _start
from benchmarks.cowork_bench.sidecar import start_postgres
from benchmarks.cowork_bench.tasks import FINALPOOL, CoworkTask, discover_tasks
from harness.core.errors import InfraError
from harness.core.fsutil import atomic_write_json
from harness.sandbox import create_internal_network, remove_labelled
from harness.sandbox import labels as L
from harness.sandbox.cleanup import run_lock

QUALIFY_INSTANCE = "qualify"  # the instance label of the shared sidecar and network


class TaskQualification(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str
    ready: bool
    servers: dict[str, str]  # name -> ready | failed: why | unconfigured: why
    tools: dict[str, list[str]]


class QualifyReport(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: str = Field(default="harness.cowork.qualify.v1", alias="schema")
    cowork_root: str
    image_id: str
    tasks: list[TaskQualification]
    seconds: float


def local_image_id(ref: str) -> str | None:
    import docker.errors

    from harness.sandbox.client import get_client

    try:
        return str(get_client().images.get(ref).id)
    except docker.errors.ImageNotFound:
        return None


def qualify_task(env: InstanceEnv, plan: McpPlan) -> McpInventory:
    container = _start(env, "agent", sanitised=True)
    try:
        return start_servers(container, plan, env.task.instance_id, env.agent_env)
    finally:
        container.remove()


def build_records(image: str) -> dict[str, str]:
    """Server folder -> why it was not built, from the record ``harness cowork
    build-servers`` leaves in its image (none in other images)."""
    import subprocess

    from benchmarks.cowork_bench.servers_image import image_status

    try:
        status = image_status(image)
    except (subprocess.SubprocessError, OSError, ValueError):
        return {}
    return {str(s["name"]): str(s.get("reason") or "") for s in status
            if s.get("status") == "not_built"}  # fmt: skip


def not_built_note(spec_strings: list[str], local_servers: str,
                   not_built: dict[str, str]) -> str | None:
    """The build record's reason for the first ``local_servers`` folder a server's command,
    arguments or cwd name, when that folder was not built into the image."""
    for text in spec_strings:
        if text.startswith(local_servers + "/"):
            folder = text[len(local_servers) + 1:].split("/", 1)[0]
            if folder in not_built:
                return f"{folder} was not built into this image: {not_built[folder]}"
    return None


def build_notes(plan: McpPlan, local_servers: str, not_built: dict[str, str]
                ) -> dict[str, str]:
    """Server name -> the build record's reason, for the servers of ``plan`` whose folder
    was not built into the image."""
    notes = {spec.name: not_built_note([spec.command, *spec.args, spec.cwd or ""],
                                       local_servers, not_built) for spec in plan.specs}
    return {name: note for name, note in notes.items() if note is not None}  # fmt: skip


def summarise(task: CoworkTask, inv: McpInventory,
              notes: dict[str, str] | None = None) -> TaskQualification:
    def state(s: ServerStatus) -> str:
        if s.state == "ready":
            return "ready"
        note = (notes or {}).get(s.name)
        return f"{s.state}: {note}; then: {s.error}" if note else f"{s.state}: {s.error}"

    servers = {s.name: state(s) for s in inv.servers}
    return TaskQualification(
        task=task.instance_id,
        ready=inv.ready,
        servers=servers,
        tools={s.name: s.tools for s in inv.servers if s.state == "ready"},
    )


def qualify(root: Path, tasks: list[CoworkTask], work: Path,
            image: str | None = None) -> QualifyReport:
    """Qualify ``tasks`` in ``image`` (an image ID; default the harness's runtime image)."""
    t0 = time.monotonic()
    ident = RunIdentity(f"cowork-qualify-{int(time.time())}", work, "main")
    image = image or ensure_image("runtime").image_id
    out: list[TaskQualification] = []
    try:
        net = create_internal_network(ident.run_id, QUALIFY_INSTANCE, ident.worker, work)
        seed = root / "db" / "init.sql.gz"
        sidecar = start_postgres(net, ident, QUALIFY_INSTANCE, seed if seed.is_file() else None)
        sidecar.enter_agent_phase()  # the servers use the agent's role, as in a run
        not_built = build_records(image)
        for task in tasks:
            env = InstanceEnv(task, root, work / task.instance_id, net, sidecar, ident, image)
            plan = plan_servers(root, task, WORKSPACE, env.local_servers)
            inv = qualify_task(env, plan)
            out.append(summarise(task, inv, build_notes(plan, env.local_servers, not_built)))
            print(line(out[-1]), flush=True)
    finally:
        remove_labelled({L.RUN: ident.run_id})
    return QualifyReport(
        cowork_root=str(root), image_id=image, tasks=out, seconds=time.monotonic() - t0
    )


def line(q: TaskQualification) -> str:
    if q.ready:
        tools = sum(len(t) for t in q.tools.values())
        return f"ready    {q.task}: {len(q.servers)} server(s), {tools} tool(s)"
    bad = "; ".join(f"{n} {s}" for n, s in q.servers.items() if s != "ready")
    return f"REFUSED  {q.task}: {bad}"


def qualify_command(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="harness cowork qualify", description=doc_summary(__doc__)
    )
    parser.add_argument("--cowork-root", type=Path, required=True, help="a Cowork checkout")
    parser.add_argument(
        "--task", action="append", default=[], metavar="ID", help="a task (repeatable; all)"
    )
    parser.add_argument("--output", type=Path, help="also write the report as JSON here")
    parser.add_argument("--cowork-image", metavar="REF", help="a local image to qualify in "
                        "(cowork-pack:<commit>, harness/cowork-servers:<hash>); default the "
                        "harness's runtime image")  # fmt: skip
    args = parser.parse_args(argv)
    root = args.cowork_root.expanduser().resolve()
    if not (root / FINALPOOL).is_dir():
        print(f"harness cowork qualify: no {FINALPOOL}/ under {root}", file=sys.stderr)
        return 2
    tasks = discover_tasks(root)
    if args.task:
        known = {t.instance_id: t for t in tasks}
        unknown = [t for t in args.task if t not in known]
        if unknown:
            print(f"harness cowork qualify: unknown task(s) {unknown}", file=sys.stderr)
            return 2
        tasks = [known[t] for t in dict.fromkeys(args.task)]
    image = None
    if args.cowork_image:
        image = local_image_id(args.cowork_image)
        if image is None:
            print(f"harness cowork qualify: --cowork-image {args.cowork_image}: no such local "
                  "image; build it (harness cowork build-image / build-servers) or pull it",
                  file=sys.stderr)  # fmt: skip
            return 2
    with tempfile.TemporaryDirectory(prefix="cowork-qualify-") as work:
        try:
            with run_lock(work).acquire(timeout=0):  # sweeps leave a locked run alone
                report = qualify(root, tasks, Path(work), image)
        except InfraError as exc:
            print(f"harness cowork qualify: infrastructure failed: {exc}", file=sys.stderr)
            return 2
    ready = sum(q.ready for q in report.tasks)
    print(f"qualified {len(report.tasks)} task(s): {ready} ready, "
          f"{len(report.tasks) - ready} refused ({report.seconds:.0f}s)")  # fmt: skip
    if args.output:
        atomic_write_json(args.output, report)
    return 0 if ready == len(report.tasks) else 1
