"""Scripted agents that solve cowork_mini tasks only through the task's MCP tools.

``IN_CONTAINER``: run by ``/opt/venv/bin/python3`` in the agent container (``--agent command``);
it reads ``$MCP_CLIENT_CONFIG`` and talks to each server through the config's stdio command
(a bridge to the persistent session). It never touches the database or the workspace itself.

:func:`host_stdio_agent`: an agent step on the host; it reaches the servers through the
outside client config (``docker exec`` stdio bridges) with the ``mcp`` SDK.
:func:`peer_http_agent`: an agent in its own container on the instance's network; it reaches
the servers through their streamable-HTTP endpoints (``McpInventory.http_urls_outside``).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Awaitable, Callable
from typing import Any

from benchmarks.cowork_bench.containers import AGENT, container_spec
from benchmarks.cowork_bench.images import PYTHON_BIN
from benchmarks.cowork_bench.phases import AgentContext, AgentOutcome
from harness.sandbox import Sandbox

Call = Callable[[str, str, dict[str, Any]], Awaitable[Any]]

# Shared by both agents: the plan for each task, in terms of ``call(server, tool, args)``.
PLANS = r"""
import csv, io, json


def unwrap(res):
    # a FastMCP tool value: structured ("result" wraps non-dicts), else the JSON text
    sc = res.structuredContent
    if sc is None:
        text = res.content[0].text if res.content else "null"
        try:
            return json.loads(text)
        except ValueError:
            return text
    return sc["result"] if set(sc) == {"result"} else sc


async def solve(task, call):
    if task == "email-reply-invoice":
        inbox = await call("emails", "get_emails", {"folder": "INBOX"})
        msg = next(m for m in inbox if m["from"] == "client@example.com")
        full = await call("emails", "read_email", {"email_id": msg["id"]})
        await call("emails", "send_email", {"to": [full["from"]], "subject": "Re: " + full["subject"],
                                            "body": "Добрый день! Счёт №4512 оплачен."})
    elif task == "gcal-standup-week":
        for day in ("2026-03-03", "2026-03-04", "2026-03-05"):
            await call("google_calendar", "create_event", {"summary": "Daily standup",
                       "start": day + "T09:30:00+00:00", "end": day + "T09:45:00+00:00"})
    elif task == "email-weekly-report":
        text = await call("filesystem", "read_file", {"path": "metrics.csv"})
        rows = [["Metric", "Value"]] + [[r["metric"], int(r["value"])]
                                        for r in csv.DictReader(io.StringIO(text))]
        await call("excel", "write_sheet", {"path": "Weekly_Report.xlsx", "sheet": "Report",
                                            "rows": rows})
        await call("emails", "send_email", {"to": ["boss@company.ru"], "subject": "Weekly report",
                                            "body": "Hi, the numbers are in Weekly_Report.xlsx."})
    elif task == "excel-sales-summary":
        text = await call("filesystem", "read_file", {"path": "sales.csv"})
        totals = {}
        for r in csv.DictReader(io.StringIO(text)):
            totals[r["region"]] = totals.get(r["region"], 0) + int(r["amount"])
        rows = [["Region", "Total"]] + [[k, totals[k]] for k in sorted(totals)]
        await call("excel", "write_sheet", {"path": "Sales_Summary.xlsx", "sheet": "Summary",
                                            "rows": rows})
    else:
        raise SystemExit("no plan for " + task)
"""

IN_CONTAINER = (
    PLANS
    + r"""
import json, os, sys
import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

CONFIG = json.load(open(os.environ["MCP_CLIENT_CONFIG"]))["mcpServers"]
TASK = os.listdir("/workspace/tasks/finalpool")[0]
CALLS = []


async def call(server, tool, args):
    params = StdioServerParameters(command=CONFIG[server]["command"], args=CONFIG[server]["args"])
    async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        res = await s.call_tool(tool, args)
    CALLS.append(server + "." + tool)
    if res.isError:
        sys.exit(f"{server}.{tool} failed: {res.content}")
    return unwrap(res)


anyio.run(solve, TASK, call)
print("mcp calls:", " ".join(CALLS))
"""
)


PEER_HTTP = (
    PLANS
    + r"""
import os, sys
import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

URLS = dict(kv.split("=", 1) for kv in os.environ["MCP_HTTP_URLS"].split(","))
CALLS = []


async def call(server, tool, args):
    async with streamable_http_client(URLS[server]) as (r, w, _), ClientSession(r, w) as s:
        await s.initialize()
        res = await s.call_tool(tool, args)
    CALLS.append(server + "." + tool)
    if res.isError:
        sys.exit(f"{server}.{tool} failed: {res.content}")
    return unwrap(res)


anyio.run(solve, os.environ["TASK"], call)
print("mcp calls:", " ".join(CALLS))
"""
)


def _unwrap(res: Any) -> Any:
    scope: dict[str, Any] = {}
    exec(PLANS, scope)
    return scope["unwrap"](res)


def _plans() -> Callable[[str, Call], Awaitable[None]]:
    scope: dict[str, Any] = {"csv": csv, "io": io}
    exec(PLANS, scope)  # the same plan text the in-container agent runs
    solve: Callable[[str, Call], Awaitable[None]] = scope["solve"]
    return solve


def host_stdio_agent(calls: list[str]) -> Callable[[AgentContext], AgentOutcome]:
    """An agent on the host: the outside client config (``docker exec`` stdio bridges)."""

    def step(ctx: AgentContext) -> AgentOutcome:
        # The mcp SDK (with anyio, starlette, ...) is imported when this agent runs, not
        # when the test module is collected: about 0.7 s of CPU in every xdist worker.
        import anyio
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client

        assert ctx.mcp is not None
        config = ctx.mcp.client_config_outside["mcpServers"]

        async def call(server: str, tool: str, args: dict[str, Any]) -> Any:
            params = StdioServerParameters(**config[server])
            async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
                await s.initialize()
                res = await s.call_tool(tool, args)
            calls.append(f"{server}.{tool}")
            if res.isError:
                raise RuntimeError(f"{server}.{tool}: {res.content}")
            return _unwrap(res)

        try:
            anyio.run(_plans(), ctx.env.task.instance_id, call)
        except BaseExceptionGroup as group:  # the transport's task group: name the cause
            leaf: BaseException = group
            while isinstance(leaf, BaseExceptionGroup):
                leaf = leaf.exceptions[0]
            raise RuntimeError(f"{type(leaf).__name__}: {leaf}") from group
        return AgentOutcome(status="success", reason_code="host_stdio_mcp")

    return step


def peer_http_agent(stdout: list[str]) -> Callable[[AgentContext], AgentOutcome]:
    """An agent in its own container on the instance network: the HTTP endpoints."""

    def step(ctx: AgentContext) -> AgentOutcome:
        assert ctx.mcp is not None
        box = Sandbox.create(container_spec(
            ctx.env.runtime_image, ctx.env.ident, ctx.env.task.instance_id,
            network=ctx.env.network, role="peer-agent", ttl_s=600, user=AGENT))  # fmt: skip
        try:
            env = {"MCP_HTTP_URLS": ctx.mcp.http_urls_outside, "TASK": ctx.env.task.instance_id}
            res = box.exec([PYTHON_BIN, "-c", PEER_HTTP], env=env, timeout=300, user=AGENT)
        finally:
            box.remove()
        stdout.append(res.stdout_text + res.stderr_text)
        if res.exit_status != 0:
            return AgentOutcome(status="failed", reason_code="peer_http_mcp")
        return AgentOutcome(status="success", reason_code="peer_http_mcp")

    return step
