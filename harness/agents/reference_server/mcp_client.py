"""The reference server's MCP client: one tool call over streamable HTTP (a plan's ``mcp``
step), to the URL a task body names in ``metadata.mcp_http_urls`` (``name=url,...``), e.g.
the harness's tool route for a Cowork task. Answers come as JSON or as server-sent events;
the session is closed (``DELETE``) after the call."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import httpx

PROTOCOL = "2025-06-18"
ACCEPT = "application/json, text/event-stream"


class McpCallFailed(Exception):
    """The server could not be reached or answered with a protocol error."""


def server_urls(metadata: dict[str, Any], key: str = "mcp_http_urls") -> dict[str, str]:
    """``name -> url`` from the body's ``name=url,...`` metadata (empty when absent)."""
    out: dict[str, str] = {}
    for item in str(metadata.get(key) or "").split(","):
        name, sep, url = item.strip().partition("=")
        if sep and name and url:
            out[name] = url
    return out


def _messages(resp: httpx.Response) -> Iterator[dict[str, Any]]:
    if "text/event-stream" not in resp.headers.get("content-type", ""):
        data = json.loads(resp.read() or b"[]")
        yield from data if isinstance(data, list) else [data]
        return
    lines: list[str] = []
    for line in resp.iter_lines():
        if line.startswith("data:"):
            lines.append(line[5:].lstrip(" "))
        elif not line and lines:
            yield json.loads("\n".join(lines))
            lines = []
    if lines:
        yield json.loads("\n".join(lines))


class _Session:
    def __init__(self, client: httpx.Client, url: str) -> None:
        self.client = client
        self.url = url
        self.headers = {"Accept": ACCEPT}
        self.next_id = 0

    def post(self, message: dict[str, Any]) -> Any:
        """Send ``message``; for a request, its result (``McpCallFailed`` on an error)."""
        rid = message.get("id")
        with self.client.stream("POST", self.url, json=message, headers=self.headers) as resp:
            if resp.status_code >= 400:
                raise McpCallFailed(f"HTTP {resp.status_code}: {resp.read()[:300]!r}")
            if "mcp-session-id" in resp.headers:
                self.headers["Mcp-Session-Id"] = resp.headers["mcp-session-id"]
            if rid is None:
                return None
            for msg in _messages(resp):
                if msg.get("id") == rid and "error" in msg:
                    raise McpCallFailed(f"{message['method']}: {msg['error'].get('message')}")
                if msg.get("id") == rid and "result" in msg:
                    return msg["result"]
        raise McpCallFailed(f"{message['method']}: no answer")

    def request(self, method: str, params: dict[str, Any]) -> Any:
        self.next_id += 1
        return self.post({"jsonrpc": "2.0", "id": self.next_id, "method": method,
                          "params": params})  # fmt: skip


def call_tool(
    url: str, tool: str, arguments: dict[str, Any], *, timeout_s: float = 600.0
) -> dict[str, Any]:
    """``tools/call`` on a fresh session to ``url``: the tool's result (``isError`` when the
    tool failed); :class:`McpCallFailed` when the server could not answer."""
    try:
        with httpx.Client(timeout=timeout_s, follow_redirects=True, trust_env=False) as client:
            session = _Session(client, url)
            init = session.request("initialize", {
                "protocolVersion": PROTOCOL, "capabilities": {},
                "clientInfo": {"name": "harness-reference-server", "version": "1"}})  # fmt: skip
            session.headers["Mcp-Protocol-Version"] = str(init.get("protocolVersion") or PROTOCOL)
            session.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
            try:
                result: dict[str, Any] = session.request(
                    "tools/call", {"name": tool, "arguments": arguments}
                )
            finally:
                if "Mcp-Session-Id" in session.headers:  # else it ends with the server
                    with contextlib.suppress(httpx.HTTPError):
                        client.delete(session.url, headers=session.headers)
            return result
    except httpx.HTTPError as exc:
        raise McpCallFailed(f"{type(exc).__name__}: {exc}") from exc


def result_text(result: dict[str, Any]) -> str:
    """The tool result's text parts (else its structured content as JSON)."""
    parts = [str(c.get("text", "")) for c in result.get("content") or [] if c.get("type") == "text"]
    if not parts and result.get("structuredContent") is not None:
        parts.append(json.dumps(result["structuredContent"], ensure_ascii=False))
    return "\n".join(parts)
