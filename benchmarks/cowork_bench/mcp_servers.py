"""A task's MCP servers: from the checkout's ``configs/mcp_servers/*.yaml`` to persistent
sessions inside the agent container, exposed to in-container and outside agents.

Plan (host, no Docker): the yaml files whose ``name`` the task lists in
``needed_mcp_servers``, with ``${local_servers_paths}``, ``${agent_workspace}`` and
``${task_dir}`` substituted for the container's paths. A listed name without a yaml, or a
yaml that is not ``type: stdio``, is *unconfigured*.

Start (:func:`start_servers`, after preprocess, before the agent): the harness's supervisor
(``/opt/harness_mcp/harness_mcp.py serve``, in the runtime image) runs detached as the
unprivileged ``agent`` user with the agent's environment (its database role), starts every
planned server as a stdio child with the yaml's command, args, env (the process environment
wins, as upstream) and cwd, and holds one MCP session to each for the whole attempt; the
MCP handshake and every request are bounded by the yaml's ``client_session_timeout_seconds``.
Each server's stderr goes to ``/workspace/dumps/mcp/<name>.stderr.log`` (at most
:data:`STDERR_LIMIT` bytes), copied to the instance folder's ``mcp/``. A probe then lists
each server's tools: the inventory ``mcp_servers.json`` (:class:`McpInventory`).

Exposure:

* inside the container, ``$MCP_CLIENT_CONFIG`` (``/workspace/dumps/mcp_config.json``, an
  ``mcpServers`` JSON whose stdio commands bridge to the persistent sessions),
  ``$MCP_HTTP_URLS`` (``name=http://127.0.0.1:8765/<name>/mcp,...``) and, for agents whose
  only tool is bash, the ``mcp-call`` command (``mcp_image/mcp-call``, written to
  :data:`MCP_CALL` when the supervisor starts: ``mcp-call --list``,
  ``mcp-call SERVER TOOL '{json}'``, through the same sessions);
* outside, two ways. ``McpInventory.http_urls_outside``: the same endpoints by the agent
  container's name on the instance's own internal network, for an agent running in a
  container attached to that network (Docker's DNS resolves the name there only). And
  ``mcp_config_outside.json`` in the instance folder: an ``mcpServers`` config whose stdio
  commands are ``docker exec -i -u agent <container> ... bridge <url>``, for an agent on the
  host (the host has no address on the instance network, by design). The port is bound in
  the container's own network namespace and never published on the host; another
  instance's containers sit on another network and can neither resolve nor reach it.
"""

from __future__ import annotations

import json
import time
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from benchmarks.cowork_bench.containers import AGENT, AGENT_ID
from benchmarks.cowork_bench.images import PYTHON_BIN, SUPERVISOR, VENV
from benchmarks.cowork_bench.tasks import CoworkTask
from harness.api import InfraError, NewDir, NewFile, Sandbox, join_tars, pack_dirs, pack_files

CONFIG_DIR = Path("configs") / "mcp_servers"
MCP_PORT = 8765
MCP_DIR = "/workspace/dumps/mcp"  # the supervisor's logs (agent-owned)
SPEC_PATH = "/workspace/dumps/mcp_spec.json"  # root-owned, readable
CLIENT_CONFIG = "/workspace/dumps/mcp_config.json"  # root-owned, readable
LOCAL_SERVERS = "/workspace/local_servers"  # the checkout's local_servers/ in the container
UPSTREAM_LOCAL_SERVERS = "/opt/local_servers"  # upstream's image: built there, named by -e
STDERR_LIMIT = 256 << 10  # bytes of one server's stderr kept
PROBE_MARGIN_S = 30.0
INVENTORY_NAME = "mcp_servers.json"
OUTSIDE_CONFIG_NAME = "mcp_config_outside.json"
LOG_DIR_NAME = "mcp"
MCP_CALL = "/usr/local/bin/mcp-call"  # root's, 0755 (also shipped in images that carry it)
MCP_CALL_SOURCE = Path(__file__).parent / "mcp_image" / "mcp-call"
# The probe (standard library only) beside mcp-call, whose client it loads: both written at
# each start, so an image built by an earlier harness (``--cowork-image``) works too.
PROBE = "/usr/local/bin/harness_mcp_probe.py"
PROBE_SOURCE = MCP_CALL_SOURCE.with_name("harness_mcp_probe.py")


class ServerParams(BaseModel):
    model_config = ConfigDict(extra="allow")

    command: str
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None


class ServerConfig(BaseModel):
    """One ``configs/mcp_servers/*.yaml`` (upstream format)."""

    model_config = ConfigDict(extra="allow")

    type: str = "stdio"
    name: str
    params: ServerParams
    client_session_timeout_seconds: float = Field(default=60.0, gt=0)
    cache_tools_list: bool = True


class ServerSpec(BaseModel):
    """What the supervisor starts (placeholders substituted)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    command: str
    args: list[str]
    env: dict[str, str]
    cwd: str | None
    timeout_s: float


class McpPlan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    specs: list[ServerSpec]
    unconfigured: dict[str, str]  # name -> why it cannot be started


class ServerStatus(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    state: Literal["ready", "failed", "unconfigured"]
    error: str | None = None
    tools: list[str] = Field(default_factory=list)
    timeout_s: float | None = None
    url_inside: str | None = None
    url_outside: str | None = None


class McpInventory(BaseModel):
    """``mcp_servers.json``: the task's servers, their tools and endpoints, in this attempt."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: str = Field(default="harness.cowork.mcp_servers.v1", alias="schema")
    instance_id: str
    servers: list[ServerStatus]
    client_config: str | None = None
    client_config_outside: dict[str, Any] = Field(default_factory=dict)  # docker exec bridges
    http_urls_inside: str = ""
    http_urls_outside: str = ""
    started_s: float = 0.0

    @property
    def ready(self) -> bool:
        return all(s.state == "ready" for s in self.servers)

    def unavailable(self) -> list[ServerStatus]:
        return [s for s in self.servers if s.state != "ready"]

    def problem(self) -> str:
        parts = [f"{s.name} ({s.state}: {s.error})" for s in self.unavailable()]
        return "MCP servers unavailable: " + "; ".join(parts)


def load_configs(root: Path) -> tuple[dict[str, ServerConfig], dict[str, str]]:
    """Every yaml of ``configs/mcp_servers`` by its ``name``; unreadable files by file stem."""
    configs: dict[str, ServerConfig] = {}
    broken: dict[str, str] = {}
    folder = Path(root) / CONFIG_DIR
    if not folder.is_dir():
        return configs, broken
    for path in sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.yml")):
        try:
            cfg = ServerConfig.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, yaml.YAMLError, ValidationError) as exc:
            broken[path.stem] = f"{path.name}: {type(exc).__name__}: {str(exc)[:200]}"
            continue
        configs[cfg.name] = cfg
    return configs, broken


@lru_cache(maxsize=16)
def local_servers_path(image_id: str) -> str:
    """Where ``image_id`` keeps the servers ``${local_servers_paths}`` names: its own
    ``LOCAL_SERVERS_PATH`` (the harness's images set it: the runtime image the per-container
    copy of the checkout, ``harness cowork build-servers`` its built ``/opt/local_servers``),
    else upstream's ``/opt/local_servers`` (its image builds the servers there and its run
    scripts pass ``-e LOCAL_SERVERS_PATH=/opt/local_servers``)."""
    import docker.errors

    from harness.api import SandboxError, get_client

    try:
        env = get_client().images.get(image_id).attrs.get("Config", {}).get("Env") or []
    except (SandboxError, docker.errors.DockerException):
        return LOCAL_SERVERS  # no engine or no such image: no container of it will start
    for item in env:
        key, _, value = str(item).partition("=")
        if key == "LOCAL_SERVERS_PATH" and value:
            return value
    return UPSTREAM_LOCAL_SERVERS


def substitutions(instance_id: str, workspace: str,
                  local_servers: str = LOCAL_SERVERS) -> dict[str, str]:
    return {
        "${local_servers_paths}": local_servers,
        "${agent_workspace}": workspace,
        "${task_dir}": f"/workspace/tasks/finalpool/{instance_id}",
    }


def _sub(value: str, subs: dict[str, str]) -> str:
    for key, repl in subs.items():
        value = value.replace(key, repl)
    return value


def plan_servers(root: Path, task: CoworkTask, workspace: str,
                 local_servers: str = LOCAL_SERVERS) -> McpPlan:
    configs, broken = load_configs(root)
    subs = substitutions(task.instance_id, workspace, local_servers)
    specs: list[ServerSpec] = []
    unconfigured: dict[str, str] = {}
    for name in task.servers:
        cfg = configs.get(name)
        if cfg is None:
            unconfigured[name] = broken.get(name) or f"no {CONFIG_DIR}/*.yaml has name {name!r}"
            continue
        if cfg.type != "stdio":
            unconfigured[name] = f"server type {cfg.type!r} is not supported (stdio only)"
            continue
        p = cfg.params
        specs.append(ServerSpec(
            name=name, command=_sub(p.command, subs), args=[_sub(a, subs) for a in p.args],
            env={k: _sub(str(v), subs) for k, v in p.env.items()},
            cwd=_sub(p.cwd, subs) if p.cwd else None,
            timeout_s=cfg.client_session_timeout_seconds,
        ))  # fmt: skip
    return McpPlan(specs=specs, unconfigured=unconfigured)


def url_inside(name: str) -> str:
    return f"http://127.0.0.1:{MCP_PORT}/{name}/mcp"


# The containers have no route out: a server's own update check can only wait for DNS. FastMCP
# (upstream's word server) asks PyPI at start-up and, on the task's internal network, spent
# about 10 s there: the whole of word.yaml's 10 s handshake (2.8 s without the check).
QUIET_SERVERS = {"FASTMCP_CHECK_FOR_UPDATES": "off"}


def container_env(task: CoworkTask, local_servers: str = LOCAL_SERVERS) -> dict[str, str]:
    """What the agent container's environment says about its MCP servers (static)."""
    env = {"PYTHON_BIN": PYTHON_BIN, "LOCAL_SERVERS_PATH": local_servers, **QUIET_SERVERS}
    if task.servers:
        env["MCP_CLIENT_CONFIG"] = CLIENT_CONFIG
        env["MCP_HTTP_URLS"] = ",".join(f"{n}={url_inside(n)}" for n in task.servers)
    return env


def client_config(servers: list[ServerStatus], container: str | None = None) -> dict[str, Any]:
    """An MCP client config of stdio bridges to the persistent sessions: run in the agent
    container, or (``container``) from the host through ``docker exec`` as the agent user."""
    prefix = ["exec", "-i", "-u", AGENT, container] if container else []
    return {
        "mcpServers": {
            s.name: {
                "command": "docker" if container else PYTHON_BIN,
                "args": [
                    *prefix,
                    *([PYTHON_BIN] if container else []),
                    SUPERVISOR,
                    "bridge",
                    url_inside(s.name),
                ],
            }
            for s in servers
            if s.state == "ready"
        }
    }


def _probe_entry(name: str, raw: Any) -> ServerStatus:
    if not isinstance(raw, dict):
        return ServerStatus(name=name, state="failed", error="no status from the supervisor")
    tools = [str(t.get("name")) for t in raw.get("tool_list") or [] if isinstance(t, dict)]
    error = raw.get("error")
    error = str(error)[:900] if error is not None else None
    if raw.get("state") == "ready":
        return ServerStatus(name=name, state="ready", error=error, tools=tools)
    return ServerStatus(name=name, state="failed", error=error or "not ready", tools=tools)


def start_servers(
    container: Sandbox,
    plan: McpPlan,
    instance_id: str,
    env: dict[str, str],
) -> McpInventory:
    """Start the supervisor in ``container`` and take the inventory (never raises for a
    server that does not start: its state says why; raises ``InfraError`` only when Docker
    itself fails)."""
    t0 = time.monotonic()
    statuses = {n: ServerStatus(name=n, state="unconfigured", error=why)
                for n, why in plan.unconfigured.items()}  # fmt: skip
    if plan.specs:
        supervisor_spec = {"port": MCP_PORT, "host": "0.0.0.0", "log_dir": MCP_DIR,
                "stderr_limit": STDERR_LIMIT,
                "servers": [s.model_dump() for s in plan.specs]}  # fmt: skip
        container.put_archive("/", join_tars([  # one copy: the log folder, then root's files
            pack_dirs([NewDir(MCP_DIR, AGENT_ID, AGENT_ID)]),
            pack_files([NewFile(SPEC_PATH, json.dumps(supervisor_spec).encode(), 0o644),
                        NewFile(MCP_CALL, MCP_CALL_SOURCE.read_bytes(), 0o755),
                        NewFile(PROBE, PROBE_SOURCE.read_bytes(), 0o644)]),
        ]))  # fmt: skip
        run_env = {**env, "PATH": f"{VENV}/bin:/usr/local/bin:/usr/bin:/bin"}
        try:
            exec_id = container.api.exec_create(
                container.id, [PYTHON_BIN, SUPERVISOR, "serve", SPEC_PATH],
                user=AGENT, environment=run_env, workdir="/workspace/dumps",
            )  # fmt: skip
            container.api.exec_start(exec_id["Id"], detach=True)
        except Exception as exc:  # docker failed, not a server
            raise InfraError(f"starting the MCP supervisor: {exc}", "mcp_unavailable") from exc
        wait = max(s.timeout_s for s in plan.specs)
        res = container.exec(
            [PYTHON_BIN, PROBE, f"http://127.0.0.1:{MCP_PORT}", "--wait", str(wait)],
            env=run_env, timeout=wait * 2 + PROBE_MARGIN_S, user=AGENT, workdir="/",
        )  # fmt: skip
        try:
            raw = json.loads(res.stdout_text) if res.exit_status == 0 else {}
        except json.JSONDecodeError:
            raw = {}
        why = f"probe exit {res.exit_status}: {res.stderr_text.strip()[-300:]}"
        for spec in plan.specs:
            entry = _probe_entry(spec.name, raw.get(spec.name)) if raw else ServerStatus(
                name=spec.name, state="failed", error=why)  # fmt: skip
            entry.timeout_s = spec.timeout_s
            statuses[spec.name] = entry
    names = [*plan.unconfigured, *(spec.name for spec in plan.specs)]
    ordered = [statuses[n] for n in dict.fromkeys(names)]
    for st in ordered:
        if st.state == "ready":
            st.url_inside = url_inside(st.name)
            st.url_outside = f"http://{container.name}:{MCP_PORT}/{st.name}/mcp"
    ready = [st for st in ordered if st.state == "ready"]
    if plan.specs:
        container.write_file(CLIENT_CONFIG, json.dumps(client_config(ordered), indent=1).encode())
    return McpInventory(
        instance_id=instance_id,
        servers=ordered,
        client_config=CLIENT_CONFIG if plan.specs else None,
        client_config_outside=client_config(ordered, container.name) if plan.specs else {},
        http_urls_inside=",".join(f"{s.name}={s.url_inside}" for s in ready),
        http_urls_outside=",".join(f"{s.name}={s.url_outside}" for s in ready),
        started_s=round(time.monotonic() - t0, 3),
    )


def has_logs(container: Sandbox) -> bool:
    """Whether the servers' log folder is there (the supervisor made it)."""
    res = container.exec(["test", "-d", MCP_DIR], user="root", timeout=30, workdir="/")
    return res.exit_status == 0
