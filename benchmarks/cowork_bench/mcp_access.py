"""How agents that are not MCP clients in the agent container reach the task's tools.

* **Bash-only agents** (mini-swe-agent: its only tool is bash in the agent container) use
  ``mcp-call`` (``mcp_image/mcp-call``, installed at ``/usr/local/bin/mcp-call`` when the
  servers start): ``mcp-call --list`` and ``mcp-call SERVER TOOL '{json}'`` go through the
  supervisor's persistent sessions. Their instruction gets :func:`tools_section`: how to
  call, and the tool list as ``mcp-call --list`` prints it in the container.
* **Agent servers outside the task network** (``--agent gateway``) get a per-attempt tool
  route (:mod:`harness.agents.gateway.tool_route`, opened by the gateway agent from
  :func:`route_request`): a token proxy on the host's loopback and a relay container on
  this instance's network that reaches only the agent container's supervisor port. The
  task body's ``metadata.mcp_http_urls`` (``name=url,...``) names each ready server's route
  URL (the token is in it); ``runner_agent/tool_route.json`` records the route (the
  token's fingerprint, never the token), and the row's ``details.agent.details.tool_route``
  the requests it forwarded and refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchmarks.cowork_bench.containers import AGENT
from benchmarks.cowork_bench.mcp_servers import MCP_CALL, MCP_PORT, McpInventory

if TYPE_CHECKING:
    from benchmarks.cowork_bench.phases import AgentContext

LISTING_CHARS = 24_000  # of ``mcp-call --list`` kept in the instruction

USAGE = """

## MCP tools

This task's MCP servers are running for you. Call their tools from bash with `mcp-call`:

    mcp-call --list [SERVER ...]              # tools, their arguments and descriptions
    mcp-call SERVER TOOL '{"name": "value"}'  # call a tool; the arguments are a JSON object
    mcp-call SERVER TOOL - < args.json        # the arguments from a file or a heredoc

It prints the tool's result; when the tool reports an error it exits 1 with the message.
"""


def ready_servers(inventory: McpInventory | None) -> list[str]:
    return [s.name for s in inventory.servers if s.state == "ready"] if inventory else []


def tools_section(ctx: AgentContext) -> str:
    """The instruction's tool section for a bash-only agent ("" without ready servers):
    :data:`USAGE` and ``mcp-call --list`` as run in the agent container (bounded); when
    listing fails, the tool names from the inventory."""
    names = ready_servers(ctx.mcp)
    if not names or ctx.mcp is None:
        return ""
    res = ctx.container.exec([MCP_CALL, "--list", *names], user=AGENT, env=ctx.env.agent_env,
                             workdir="/", timeout=120)  # fmt: skip
    listing = res.stdout_text.strip() if res.exit_status == 0 else ""
    if not listing:
        listing = "\n".join(f"{s.name}: {', '.join(s.tools)}" for s in ctx.mcp.servers
                            if s.state == "ready")  # fmt: skip
    if len(listing) > LISTING_CHARS:
        listing = (
            listing[:LISTING_CHARS].rsplit("\n", 1)[0]
            + "\n[... cut: run `mcp-call --list SERVER` for the rest]"
        )
    return USAGE + "\nThe tools:\n\n" + listing + "\n"


def route_request(inventory: McpInventory | None) -> dict[str, object] | None:
    """What an agent server outside the task network needs routed (``AgentRequest.extra``
    ``tool_route``, read by the gateway agent: :mod:`harness.agents.gateway.tool_route`):
    each ready server's endpoint on the agent container's supervisor port, named in the
    task body's ``metadata.mcp_http_urls``. None without ready servers."""
    names = ready_servers(inventory)
    if not names:
        return None
    return {  # the trailing slash: the supervisor's mount redirects there (a redirect's
        "port": MCP_PORT,  # Location would lose the token in the path)
        "endpoints": {n: f"/{n}/mcp/" for n in names},
        "metadata_key": "mcp_http_urls",
    }
