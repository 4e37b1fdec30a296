"""MCP servers per task: plan from the upstream yaml, persistent sessions in the agent
container, the generated client config (inside) and HTTP endpoints (outside), qualify,
``mcp_unavailable``, ``--cowork-allow-missing-tools``, isolation between instances.

The servers are the fixture's ``local_servers/mini_office`` (``mcp`` SDK), configured by
``configs/mcp_servers/*.yaml`` in the upstream format.
"""

from __future__ import annotations

import json
import secrets
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.cowork_bench.agents import nop_agent
from benchmarks.cowork_bench.containers import RunIdentity, container_spec
from benchmarks.cowork_bench.images import PYTHON_BIN, ensure_image
from benchmarks.cowork_bench.instance import run_instance
from benchmarks.cowork_bench.mcp_servers import (
    INVENTORY_NAME,
    LOCAL_SERVERS,
    MCP_PORT,
    STDERR_LIMIT,
    McpInventory,
    plan_servers,
)
from benchmarks.cowork_bench.phases import WORKSPACE, AgentContext, AgentOutcome
from benchmarks.cowork_bench.sidecar import start_postgres
from benchmarks.cowork_bench.tasks import CoworkTask, load_task
from harness.sandbox import (
    Sandbox,
    create_internal_network,
    leaked_resources,
    remove_labelled,
    run_lock,
)
from tests.benchmarks.cowork.cowork_helpers import FIXTURE
from tests.benchmarks.cowork.cowork_mcp_agents import (
    IN_CONTAINER,
    host_stdio_agent,
    peer_http_agent,
)
from tests.benchmarks.cowork.cowork_run_support import FAST_DNS
from tests.support.suite import REPO_ROOT, run_pytest

TARGET = "benchmarks/cowork_bench"
MCP_TASKS = ["email-reply-invoice", "gcal-standup-week", "email-weekly-report",
             "excel-sales-summary"]  # fmt: skip
# The in-container run: every server of MCP_TASKS (emails, google_calendar, filesystem and
# excel, which email-weekly-report also uses) on one more task than the run's two workers.
INSIDE_TASKS = MCP_TASKS[:3]
BROKEN_TASK = "mcp-broken-server"
BROKEN_YAMLS = {
    "broken": "type: stdio\nname: broken\nparams:\n  command: /nonexistent/mcp-server\n"
    "client_session_timeout_seconds: 10\n",
    "silent": "type: stdio\nname: silent\nparams:\n  command: sleep\n  args: ['600']\n"
    "client_session_timeout_seconds: 3\n",
    "noisy": "type: stdio\nname: noisy\nparams:\n  command: sh\n  args: ['-c', "
    "\"head -c 3000000 /dev/zero | tr '\\\\0' x >&2; exit 3\"]\n"
    "client_session_timeout_seconds: 20\n",
}


def task_with(servers: tuple[str, ...]) -> CoworkTask:
    return CoworkTask(instance_id="t1", servers=servers, local_tools=(),
                      has_initial_workspace=False, has_groundtruth=False, prefix="t1")  # fmt: skip


def test_plan_substitutes_the_upstream_placeholders(tmp_path: Path) -> None:
    folder = tmp_path / "configs" / "mcp_servers"
    folder.mkdir(parents=True)
    (folder / "terminal.yaml").write_text(
        "type: stdio\nname: terminal\nparams:\n  command: uv\n  args:\n"
        '    - "--directory"\n    - "${local_servers_paths}/cli-mcp-server"\n'
        '    - "--config_file"\n    - "${task_dir}/email_config.json"\n'
        '  env:\n    ALLOWED_DIR: "${agent_workspace}"\n  cwd: "${agent_workspace}"\n'
        "client_session_timeout_seconds: 45\ncache_tools_list: true\n"
    )
    (folder / "web.yaml").write_text("type: sse\nname: web\nparams:\n  command: x\n")
    (folder / "bad.yaml").write_text("name: [unclosed\n")
    plan = plan_servers(tmp_path, task_with(("terminal", "web", "nosuch")), WORKSPACE)
    (spec,) = plan.specs
    assert spec.args == ["--directory", f"{LOCAL_SERVERS}/cli-mcp-server", "--config_file",
                         "/workspace/tasks/finalpool/t1/email_config.json"]  # fmt: skip
    assert spec.env == {"ALLOWED_DIR": WORKSPACE} and spec.cwd == WORKSPACE
    assert spec.timeout_s == 45
    assert "not supported" in plan.unconfigured["web"]
    assert "no configs/mcp_servers" in plan.unconfigured["nosuch"]


def test_every_fixture_task_names_only_configured_servers() -> None:
    for iid in [*MCP_TASKS, "sklad-reorder-excel"]:
        plan = plan_servers(FIXTURE, load_task(FIXTURE, iid), WORKSPACE)
        assert plan.unconfigured == {} and plan.specs, iid


# --------------------------------------------------------------------------- Docker


def broken_checkout(tmp: Path) -> Path:
    """The fixture as its own git checkout, plus a task naming three servers that cannot
    start (a missing command, one that never answers within its timeout, one that floods
    stderr and exits) next to a good one."""
    root = tmp / "bench"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns(".ruff_cache", "__pycache__"))
    for name, text in BROKEN_YAMLS.items():
        (root / "configs" / "mcp_servers" / f"{name}.yaml").write_text(text)
    task = root / "tasks" / "finalpool" / BROKEN_TASK
    shutil.copytree(root / "tasks" / "finalpool" / "email-reply-invoice", task)
    config = json.loads((task / "task_config.json").read_text())
    config["needed_mcp_servers"] = ["emails", *BROKEN_YAMLS]
    (task / "task_config.json").write_text(json.dumps(config))
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "bench"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    return root


def qualify(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", "cowork", "qualify", "--cowork-root", str(root),
         *args], capture_output=True, text=True, cwd=REPO_ROOT, timeout=600,
    )  # fmt: skip


@pytest.mark.docker
def test_qualify_lists_tools_and_refuses_the_broken_servers(tmp_path: Path) -> None:
    root = broken_checkout(tmp_path)
    out = tmp_path / "qualify.json"
    proc = qualify(root, "--task", "email-reply-invoice", "--task", BROKEN_TASK,
                   "--output", str(out))  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "ready    email-reply-invoice" in proc.stdout
    assert f"REFUSED  {BROKEN_TASK}" in proc.stdout
    report = {t["task"]: t for t in json.loads(out.read_text())["tasks"]}
    good = report["email-reply-invoice"]
    assert good["ready"] and set(good["tools"]["emails"]) == {"get_emails", "read_email",
                                                               "send_email"}  # fmt: skip
    bad = report[BROKEN_TASK]
    assert not bad["ready"] and bad["servers"]["emails"] == "ready"
    assert "/nonexistent/mcp-server" in bad["servers"]["broken"]
    assert "client_session_timeout_seconds=3" in bad["servers"]["silent"]
    assert bad["servers"]["noisy"].startswith("failed")


@pytest.mark.docker
def test_a_broken_server_is_mcp_unavailable_unless_allowed(tmp_path: Path) -> None:
    root = broken_checkout(tmp_path)
    base = ["--cowork-root", str(root), "--cowork-allow-bench-commit-mismatch",
            "--instance", BROKEN_TASK]  # fmt: skip
    marker = "/workspace/dumps/workspace/agent_ran"
    # One attempt: the runner's in-run retry of an infrastructure failure (default 1) would
    # start the same broken servers again for nothing this test reads (the retry itself is
    # tests/runner/test_retry_infra.py's).
    run = run_pytest(TARGET, tmp_path / "refused", *base, "--retry-infra", "0", "--agent",
                     "command", "--agent-command", f"touch {marker}")  # fmt: skip
    assert run.rc == 1, run.out  # infrastructure: not settled, retried on resume
    row = run.latest[BROKEN_TASK]
    assert (row["status"], row["reason_code"], row["infra"]) == (
        "infra_failed", "mcp_unavailable", True)  # fmt: skip
    assert row["score"] is None and row["resolved"] is None
    assert row["details"]["cowork_bench"]["mcp_servers"] == {
        "emails": "ready", "broken": "failed", "silent": "failed", "noisy": "failed"}
    inst = run.root / "cowork_bench" / BROKEN_TASK
    assert not (inst / "workspace" / "agent_ran").exists()  # the agent never started
    noisy = inst / "mcp" / "noisy.stderr.log"
    assert STDERR_LIMIT <= noisy.stat().st_size <= STDERR_LIMIT + 100  # bounded, 3 MB written

    allowed = run_pytest(TARGET, tmp_path / "allowed", *base, "--cowork-allow-missing-tools",
                         "--agent", "command", "--agent-command", f"touch {marker}")  # fmt: skip
    row = allowed.latest[BROKEN_TASK]
    assert (row["status"], row["reason_code"]) == ("failed", "verifier_failed"), allowed.out
    assert (allowed.root / "cowork_bench" / BROKEN_TASK / "workspace" / "agent_ran").exists()
    assert allowed.manifest["extra"]["cowork"]["applied_config"]["allow_missing_tools"] is True


@pytest.mark.docker
def test_in_container_agent_uses_the_generated_config_three_tasks_share_no_port(
    tmp_path: Path,
) -> None:
    command = f"{PYTHON_BIN} -c {shlex.quote(IN_CONTAINER)}"
    args = [arg for iid in INSIDE_TASKS for arg in ("--instance", iid)]
    run = run_pytest(TARGET, tmp_path / "inside", "--cowork-root", str(FIXTURE),
                     "--cowork-allow-dirty-bench", *args, "--agent", "command",
                     "--agent-command", command, "-n", "2", timeout=900)  # fmt: skip
    assert run.rc == 0, run.out
    assert set(run.latest) == set(INSIDE_TASKS)
    hosts = set()
    for iid in INSIDE_TASKS:
        row = run.latest[iid]
        assert row["status"] == "passed", (iid, row)
        own = row["details"]["cowork_bench"]
        assert own["runtime_image"].startswith("sha256:")
        assert own["mcp_servers"] and set(own["mcp_servers"].values()) == {"ready"}
        stdout = (run.root / row["output_paths"]["agent_stdout"]).read_text()
        assert "mcp calls:" in stdout, stdout
        inv = McpInventory.model_validate_json(
            (run.root / "cowork_bench" / iid / INVENTORY_NAME).read_bytes()
        )
        assert inv.ready and inv.client_config == "/workspace/dumps/mcp_config.json"
        hosts |= {s.url_outside.split("/")[2] for s in inv.servers if s.url_outside}
    # Persistent sessions: every call of the agent's (a fresh bridge each) reached the one
    # supervised server process, whose stderr is the instance's mcp/emails.stderr.log.
    log = run.root / "cowork_bench" / "email-reply-invoice" / "mcp" / "emails.stderr.log"
    assert log.read_text().count("CallToolRequest") == 3
    # One agent container per instance, each on its own internal network; the port is bound
    # in that container's network namespace (nothing on the host).
    assert len(hosts) == len(INSIDE_TASKS) and all(h.endswith(f":{MCP_PORT}") for h in hosts)


@pytest.fixture
def run_ident(tmp_path: Path) -> Iterator[RunIdentity]:
    ident = RunIdentity(f"cowork-mcp-{secrets.token_hex(4)}", tmp_path)
    with run_lock(tmp_path).acquire(timeout=0):
        yield ident
    assert leaked_resources(run_id_prefix=ident.run_id) == {
        "containers": [], "networks": [], "volumes": []
    }  # fmt: skip


def reach(ident: RunIdentity, network: str, url: str, must_fail: bool = False) -> str:
    """What a container on ``network`` gets from ``url`` (an HTTP status or the error);
    ``must_fail``: the name is not on that network, so its lookup gives up early."""
    box = Sandbox.create(container_spec(ensure_image("runtime").image_id, ident, "probe",
                                        network=network, role="probe", ttl_s=120))
    try:
        code = ("import urllib.request, sys\ntry:\n"
                f" print(urllib.request.urlopen({url!r}, timeout=3).status)\n"
                "except Exception as e:\n print(type(e).__name__)")  # fmt: skip
        env = FAST_DNS if must_fail else None
        return box.exec(["python3", "-c", code], env=env, timeout=30).stdout_text.strip()
    finally:
        box.remove()


@pytest.mark.docker
def test_outside_agents_over_docker_exec_and_http_pass_nop_fails_other_networks_cannot_reach(
    tmp_path: Path, run_ident: RunIdentity
) -> None:
    iid = "email-reply-invoice"
    task = load_task(FIXTURE, iid)
    seen: dict[str, object] = {}
    calls: list[str] = []
    peer_out: list[str] = []
    host_agent = host_stdio_agent(calls)

    def host_then_probe(ctx: AgentContext) -> AgentOutcome:
        outcome = host_agent(ctx)
        assert ctx.mcp is not None
        info = ctx.container.api.inspect_container(ctx.container.id)
        seen["ports"] = info["NetworkSettings"]["Ports"], info["HostConfig"]["PortBindings"]
        status = f"http://{ctx.container.name}:{MCP_PORT}/status"
        seen["same_network"] = reach(run_ident, ctx.env.network, status)
        other = create_internal_network(run_ident.run_id, "other-task", run_ident.worker,
                                        run_ident.run_root)  # fmt: skip
        seen["other_network"] = reach(run_ident, other, status, must_fail=True)
        return outcome

    agents = {"host": host_then_probe, "peer": peer_http_agent(peer_out), "nop": nop_agent}
    results = {}
    try:
        net = create_internal_network(run_ident.run_id, iid, run_ident.worker, tmp_path)
        sidecar = start_postgres(net, run_ident, iid, FIXTURE / "db" / "init.sql.gz")
        for name, step in agents.items():  # preprocess resets the mailbox each time
            inst = tmp_path / "cowork_bench" / f"{iid}--{name}"
            results[name] = run_instance(task, FIXTURE, inst, step, name,  # type: ignore[arg-type]
                                         ident=run_ident, sidecar=sidecar)  # fmt: skip
    finally:
        remove_labelled({"harness.run": run_ident.run_id})
    for name in ("host", "peer"):
        res = results[name]
        assert res.summary is not None and not res.summary.infra_failed, (name, res.summary)
        assert res.eval is not None and res.eval.passed is True, (name, peer_out)
    assert calls == ["emails.get_emails", "emails.read_email", "emails.send_email"]
    assert "mcp calls: emails.get_emails emails.read_email emails.send_email" in peer_out[0]
    nop = results["nop"]
    assert nop.eval is not None and nop.eval.passed is False
    assert seen["ports"] in (({}, {}), ({}, None), (None, None))  # nothing published
    assert seen["same_network"] == "200"
    assert seen["other_network"] == "URLError"  # another task's network: no such name


# slow tier: end-to-end Docker runs of a minute or more together (CI runs the tier after
# the default one, which stays under its 10 minutes)
pytestmark = pytest.mark.slow
