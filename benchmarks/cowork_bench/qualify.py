"""``harness cowork qualify``: start each selected task's MCP servers, list their tools, and
say per task whether it is ready, or which server failed and why (before paying for a run).

    harness cowork qualify --cowork-root PATH [--task ID ...] [--output FILE]
    harness cowork qualify --cowork-root PATH --all [--table FILE] [--jobs N]

``--all`` takes every task and starts the servers once per distinct server set (the tasks
naming the same servers share one start, in the container of the first of them), then writes
a Markdown table (``--table``, default ``cowork-qualify-<UTC time>.md`` here): the count of
tasks that can run on this image, per server how many tasks need it and why it failed, and
per task its servers' states. The image is the harness's runtime image, ``--cowork-image
REF``, or the checkout's own with the harness's layer (``--cowork-build-image``, see ``harness
cowork build-image``); ``--cowork-pg-image REF`` chooses the sidecar's image as in a run.

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
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

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
from harness.api import (
    RUN_LABEL,
    InfraError,
    RenamedOption,
    atomic_write_json,
    atomic_write_text,
    create_internal_network,
    remove_labelled,
    run_lock,
)

QUALIFY_INSTANCE = "qualify"  # the instance label of the shared sidecar and network
MAX_REASONS = 3
RENAMED_BUILD_IMAGE = RenamedOption("--build-image", "--cowork-build-image", flag=True)
REASON_CHARS = 240  # of one reason, in the table


class TaskQualification(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str
    ready: bool
    servers: dict[str, str]  # name -> ready | failed: why | unconfigured: why
    tools: dict[str, list[str]]


class ServerSetQualification(BaseModel):
    """One distinct server set (``--all``): started once, for every task naming it."""

    model_config = ConfigDict(extra="forbid")

    servers: list[str]
    started_in: str  # the task whose container started them
    tasks: list[str]
    ready: bool
    seconds: float


class ServerSummary(BaseModel):
    """One server across the sets that name it (``--all``)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    tasks: int  # tasks that need it
    sets_ready: int
    sets_not_ready: int
    reasons: list[str]  # its distinct failures (at most MAX_REASONS)


class QualifyReport(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: str = Field(default="harness.cowork.qualify.v1", alias="schema")
    cowork_root: str
    image_id: str
    tasks: list[TaskQualification]
    seconds: float
    mode: Literal["task", "server_set"] = "task"
    pg_image_id: str | None = None
    server_sets: list[ServerSetQualification] = Field(default_factory=list)
    server_summary: list[ServerSummary] = Field(default_factory=list)

    @property
    def ready_count(self) -> int:
        return sum(q.ready for q in self.tasks)


def local_image_id(ref: str) -> str | None:
    import docker.errors

    from harness.api import get_client

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


def not_built_note(
    spec_strings: list[str], local_servers: str, not_built: dict[str, str]
) -> str | None:
    """The build record's reason for the first ``local_servers`` folder a server's command,
    arguments or cwd name, when that folder was not built into the image."""
    for text in spec_strings:
        if text.startswith(local_servers + "/"):
            folder = text[len(local_servers) + 1 :].split("/", 1)[0]
            if folder in not_built:
                return f"{folder} was not built into this image: {not_built[folder]}"
    return None


def build_notes(plan: McpPlan, local_servers: str, not_built: dict[str, str]) -> dict[str, str]:
    """Server name -> the build record's reason, for the servers of ``plan`` whose folder
    was not built into the image."""
    notes = {
        spec.name: not_built_note(
            [spec.command, *spec.args, spec.cwd or ""], local_servers, not_built
        )
        for spec in plan.specs
    }
    return {name: note for name, note in notes.items() if note is not None}  # fmt: skip


def summarise(
    task: CoworkTask, inv: McpInventory, notes: dict[str, str] | None = None
) -> TaskQualification:
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


def server_sets(tasks: list[CoworkTask]) -> dict[tuple[str, ...], list[CoworkTask]]:
    """The tasks by their distinct server set (sorted names), in order of first appearance;
    a set's first task starts its servers."""
    groups: dict[tuple[str, ...], list[CoworkTask]] = {}
    for task in tasks:
        groups.setdefault(tuple(sorted(set(task.servers))), []).append(task)
    return groups


def for_task(q: TaskQualification, task: CoworkTask) -> TaskQualification:
    """The set's qualification as another task of the set's own."""
    return q.model_copy(update={"task": task.instance_id})


def summarise_servers(
    tasks: list[CoworkTask],
    sets: list[ServerSetQualification],
    by_task: dict[str, TaskQualification],
) -> list[ServerSummary]:
    """Per server: how many tasks need it, in how many sets it was ready, and why not."""
    need: dict[str, int] = {}
    for task in tasks:
        for name in set(task.servers):
            need[name] = need.get(name, 0) + 1
    out: dict[str, ServerSummary] = {
        n: ServerSummary(name=n, tasks=c, sets_ready=0, sets_not_ready=0, reasons=[])
        for n, c in need.items()
    }
    for group in sets:
        states = by_task[group.started_in].servers
        for name in group.servers:
            state = states.get(name, "unconfigured: not started")
            entry = out[name]
            if state == "ready":
                entry.sets_ready += 1
                continue
            entry.sets_not_ready += 1
            if state not in entry.reasons and len(entry.reasons) < MAX_REASONS:
                entry.reasons.append(state)
    return sorted(out.values(), key=lambda e: (-e.tasks, e.name))


def qualify(
    root: Path,
    tasks: list[CoworkTask],
    work: Path,
    image: str | None = None,
    *,
    by_set: bool = False,
    jobs: int = 1,
    pg_image: str | None = None,
    out_line: Callable[[str], None] | None = None,
) -> QualifyReport:
    """Qualify ``tasks`` in ``image`` (an image ID; default the harness's runtime image):
    each task in its own container, or (``by_set``) once per distinct server set; ``jobs``
    containers at a time."""
    t0 = time.monotonic()
    ident = RunIdentity(f"cowork-qualify-{int(time.time())}", work, "main")
    image = image or ensure_image("runtime").image_id
    emit = out_line or (lambda text: print(text, flush=True))
    printing = threading.Lock()
    groups: dict[tuple[str, ...], list[CoworkTask]] = (
        server_sets(tasks) if by_set else {(t.instance_id,): [t] for t in tasks}
    )
    results: dict[tuple[str, ...], tuple[TaskQualification, float]] = {}
    sidecar_image: str | None = None
    try:
        net = create_internal_network(ident.run_id, QUALIFY_INSTANCE, ident.worker, work)
        seed = root / "db" / "init.sql.gz"
        sidecar = start_postgres(net, ident, QUALIFY_INSTANCE, seed if seed.is_file() else None,
                                 image_id=pg_image)  # fmt: skip
        sidecar_image = sidecar.image_id
        sidecar.enter_agent_phase()  # the servers use the agent's role, as in a run
        not_built = build_records(image)

        def one(key: tuple[str, ...]) -> None:
            started = time.monotonic()
            task = groups[key][0]
            env = InstanceEnv(task, root, work / task.instance_id, net, sidecar, ident, image)
            plan = plan_servers(root, task, WORKSPACE, env.local_servers)
            inv = qualify_task(env, plan)
            q = summarise(task, inv, build_notes(plan, env.local_servers, not_built))
            results[key] = (q, time.monotonic() - started)
            with printing:
                emit(set_line(q, len(groups[key]), key) if by_set else line(q))

        if jobs <= 1:
            for key in groups:
                one(key)
        else:
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                for future in [pool.submit(one, key) for key in groups]:
                    future.result()
    finally:
        remove_labelled({RUN_LABEL: ident.run_id})
    out: list[TaskQualification] = []
    sets: list[ServerSetQualification] = []
    for key, members in groups.items():
        q, seconds = results[key]
        out.extend(for_task(q, t) for t in members)
        if by_set:
            sets.append(ServerSetQualification(
                servers=list(key), started_in=q.task, tasks=[t.instance_id for t in members],
                ready=q.ready, seconds=round(seconds, 3)))  # fmt: skip
    order = {t.instance_id: i for i, t in enumerate(tasks)}
    out.sort(key=lambda q: order[q.task])
    by_task = {q.task: q for q in out}
    return QualifyReport(
        cowork_root=str(root), image_id=image, tasks=out, seconds=time.monotonic() - t0,
        mode="server_set" if by_set else "task", pg_image_id=sidecar_image, server_sets=sets,
        server_summary=summarise_servers(tasks, sets, by_task) if by_set else [],
    )  # fmt: skip


def set_line(q: TaskQualification, count: int, servers: tuple[str, ...]) -> str:
    names = "+".join(servers) or "(no servers)"
    if q.ready:
        tools = sum(len(t) for t in q.tools.values())
        return f"ready    [{count} task(s)] {names}: {tools} tool(s) (in {q.task})"
    bad = "; ".join(f"{n} {s}" for n, s in q.servers.items() if s != "ready")
    return f"REFUSED  [{count} task(s)] {names}: {bad}"


def _cell(text: str, limit: int = REASON_CHARS) -> str:
    one = " ".join(text.split()).replace("|", "\\|")
    return one if len(one) <= limit else one[: limit - 1] + "…"


def render_table(report: QualifyReport) -> str:
    """The ``--all`` table: the count, the servers, the tasks that can run and those that
    cannot with the reason per server."""
    total, ready = len(report.tasks), report.ready_count
    lines = [
        f"# Cowork qualification: {report.cowork_root}",
        "",
        f"**{ready} of {total} tasks can run on this image** ({total - ready} cannot): image "
        f"`{report.image_id}`, PostgreSQL `{report.pg_image_id}`; {len(report.server_sets)} "
        f"distinct server sets started once each, {report.seconds:.0f} s.",
        "",
        "## Servers",
        "",
        "| server | tasks needing it | sets ready | sets not ready | why not |",
        "|---|---:|---:|---:|---|",
    ]
    for e in report.server_summary:
        why = "<br>".join(_cell(r) for r in e.reasons)
        lines.append(f"| {e.name} | {e.tasks} | {e.sets_ready} | {e.sets_not_ready} | {why} |")
    lines += ["", f"## Tasks that can run ({ready})", "", "| task | servers (tools) |", "|---|---|"]
    for q in report.tasks:
        if q.ready:
            tools = ", ".join(f"{n} ({len(q.tools.get(n, []))})" for n in q.servers)
            lines.append(f"| {q.task} | {tools} |")
    lines += ["", f"## Tasks that cannot run ({total - ready})", "",
              "| task | servers not ready: why | ready |", "|---|---|---|"]  # fmt: skip
    for q in report.tasks:
        if not q.ready:
            bad = "<br>".join(f"**{n}** {_cell(s)}" for n, s in q.servers.items() if s != "ready")
            good = ", ".join(n for n, s in q.servers.items() if s == "ready")
            lines.append(f"| {q.task} | {bad} | {good} |")
    return "\n".join(lines) + "\n"


def line(q: TaskQualification) -> str:
    if q.ready:
        tools = sum(len(t) for t in q.tools.values())
        return f"ready    {q.task}: {len(q.servers)} server(s), {tools} tool(s)"
    bad = "; ".join(f"{n} {s}" for n, s in q.servers.items() if s != "ready")
    return f"REFUSED  {q.task}: {bad}"


def qualify_command(argv: list[str] | None = None) -> int:
    prog = "harness cowork qualify"
    args = _parser(prog).parse_args(argv)
    root = args.cowork_root.expanduser().resolve()
    problem = _usage_problem(args, root)
    if problem:
        print(f"{prog}: {problem}", file=sys.stderr)
        return 2
    tasks = _selected_tasks(prog, args, root)
    if tasks is None:
        return 2
    images = _images(prog, args, root)
    if images is None:
        return 2
    table = args.table
    if args.all and table is None:
        table = Path(f"cowork-qualify-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.md")
    with tempfile.TemporaryDirectory(prefix="cowork-qualify-") as work:
        try:
            with run_lock(work).acquire(timeout=0):  # sweeps leave a locked run alone
                report = qualify(root, tasks, Path(work), images["image"], by_set=args.all,
                                 jobs=args.jobs, pg_image=images["pg"])  # fmt: skip
        except InfraError as exc:
            print(f"{prog}: infrastructure failed: {exc}", file=sys.stderr)
            return 2
    return _report(args, report, table)


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=doc_summary(__doc__))
    parser.add_argument("--cowork-root", type=Path, required=True, help="a Cowork checkout")
    parser.add_argument(
        "--task", action="append", default=[], metavar="ID", help="a task (repeatable; all)"
    )
    parser.add_argument("--all", action="store_true", help="every task, the servers started "
                        "once per distinct server set; writes the --table")  # fmt: skip
    parser.add_argument("--table", type=Path, metavar="FILE", help="with --all: the Markdown "
                        "table (default cowork-qualify-<UTC time>.md here)")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="containers qualified at a time (default 1)")  # fmt: skip
    parser.add_argument("--output", type=Path, help="also write the report as JSON here")
    parser.add_argument("--cowork-image", metavar="REF", help="a local image to qualify in "
                        "(cowork-pack:<commit>, harness/cowork-servers:<hash>); default the "
                        "harness's runtime image")  # fmt: skip
    parser.add_argument("--cowork-build-image", dest="build_image", action="store_true",
                        help="qualify in the checkout's own image with the harness's layer "
                        "(built if missing, as a run's --cowork-build-image)")  # fmt: skip
    RENAMED_BUILD_IMAGE.register(parser)  # the old spelling: refused, naming the new one
    parser.add_argument(
        "--cowork-pg-image",
        metavar="REF",
        help="a local PostgreSQL image for "
        "the sidecar (the harness's layout or the official postgres image's)",
    )
    return parser


def _usage_problem(args: argparse.Namespace, root: Path) -> str | None:
    """What is wrong with the command line as given (before any task is read), if anything."""
    if getattr(args, RENAMED_BUILD_IMAGE.dest) is not None:
        return str(RENAMED_BUILD_IMAGE.refusal(""))
    if not (root / FINALPOOL).is_dir():
        return f"no {FINALPOOL}/ under {root}"
    if args.all and args.task:
        return "--all and --task: give one"
    if args.table and not args.all:
        return "--table needs --all"
    if args.jobs < 1:
        return f"--jobs {args.jobs}: give a positive number"
    if args.build_image and args.cowork_image:
        return "--cowork-build-image and --cowork-image both choose the image: give one"
    return None


def _selected_tasks(prog: str, args: argparse.Namespace, root: Path) -> list[CoworkTask] | None:
    """The tasks to qualify (all, or the ``--task`` ones); None (said) on an unknown one."""
    tasks = discover_tasks(root)
    if args.task:
        known = {t.instance_id: t for t in tasks}
        unknown = [t for t in args.task if t not in known]
        if unknown:
            print(f"{prog}: unknown task(s) {unknown}", file=sys.stderr)
            return None
        tasks = [known[t] for t in dict.fromkeys(args.task)]
    return tasks


def _images(prog: str, args: argparse.Namespace, root: Path) -> dict[str, str | None] | None:
    """The image ids to qualify in (``image``: the agent's, ``pg``: the sidecar's; None the
    harness's own); None (said) when a named image is missing or ``--cowork-build-image``
    failed."""
    images: dict[str, str | None] = {"image": None, "pg": None}
    for key, flag, ref in (("image", "--cowork-image", args.cowork_image),
                           ("pg", "--cowork-pg-image", args.cowork_pg_image)):  # fmt: skip
        if ref:
            images[key] = local_image_id(ref)
            if images[key] is None:
                print(f"{prog}: {flag} {ref}: no such local image; build it (harness cowork "
                      "build-image / build-servers) or pull it", file=sys.stderr)  # fmt: skip
                return None
    if args.build_image:
        from benchmarks.cowork_bench.build_image import BuildFailed, ensure_checkout_image

        try:
            built = ensure_checkout_image(root)
        except (BuildFailed, ValueError, OSError) as exc:
            print(f"{prog}: --cowork-build-image: {exc}", file=sys.stderr)
            return None
        assert built.derived is not None
        images["image"] = built.derived.image_id
        print(f"qualifying in {built.derived.tag} ({built.tag} with the harness's layer)",
              file=sys.stderr)  # fmt: skip
    return images


def _report(args: argparse.Namespace, report: QualifyReport, table: Path | None) -> int:
    """The summary line, the ``--output`` JSON and the ``--table``; the exit status."""
    ready = report.ready_count
    sets = f" in {len(report.server_sets)} server set(s)" if args.all else ""
    print(f"qualified {len(report.tasks)} task(s){sets}: {ready} ready, "
          f"{len(report.tasks) - ready} refused ({report.seconds:.0f}s)")  # fmt: skip
    if args.output:
        atomic_write_json(args.output, report)
    if table is not None:
        atomic_write_text(table, render_table(report))
        print(f"table: {table}")
    return 0 if ready == len(report.tasks) else 1
