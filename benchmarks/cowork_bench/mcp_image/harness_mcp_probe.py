"""The harness's MCP probe; runs INSIDE the Cowork agent container, Python's standard library
only (the supervisor's ``mcp`` SDK costs a new process about 0.6 s of CPU to import).

Written beside ``mcp-call`` (``/usr/local/bin``) at each start of the servers, whose
streamable-HTTP client it loads from there.

``harness_mcp_probe.py BASE [--wait S]`` waits until the supervisor at ``BASE`` has settled
every server (``GET BASE/status``: none ``starting``), at most ``S`` seconds, then lists each
ready server's tools through the endpoint an agent gets (``BASE/<name>/mcp``, a session of
its own) and prints one JSON object: per server its state, error, tool count and, when ready,
``tool_list`` (name, description cut to 200 characters). A server whose listing fails is
reported ``failed`` with the reason; the caller decides.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import urllib.request
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType
from typing import Any

OPEN = urllib.request.build_opener(urllib.request.ProxyHandler({})).open  # never a proxy


def _mcp_call() -> ModuleType:
    """``mcp-call`` (a script without a suffix) as a module: its ``Session`` client."""
    path = Path(__file__).with_name("mcp-call")
    loader = SourceFileLoader("harness_mcp_call", str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    if spec is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _status(base: str) -> dict[str, Any]:
    with OPEN(f"{base}/status", timeout=5) as resp:
        data: dict[str, Any] = json.load(resp)
    return data


def _list(client: ModuleType, url: str) -> list[dict[str, Any]]:
    with client.Session(url) as session:
        tools = session.tools()
    return [{"name": t.get("name"), "description": (t.get("description") or "")[:200]}
            for t in tools]  # fmt: skip


def probe(base: str, wait_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + wait_s
    states: dict[str, Any] = {}
    while True:
        try:
            states = _status(base)
            if all(s["state"] != "starting" for s in states.values()):
                break
        except OSError as exc:
            states = {"_supervisor": {"state": "failed", "error": f"not answering: {exc}"}}
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    client = _mcp_call()
    out: dict[str, Any] = {}
    for name, st in states.items():
        entry = dict(st)
        if st.get("state") == "starting":
            entry.update(state="failed", error=f"still starting after {wait_s:g}s")
        if entry.get("state") == "ready":
            try:
                entry["tool_list"] = _list(client, f"{base}/{name}/mcp")
            except Exception as exc:  # reported, the caller decides
                entry.update(state="failed",
                             error=f"listing tools: {type(exc).__name__}: {exc}"[:500])  # fmt: skip
        out[name] = entry
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="harness_mcp_probe")
    parser.add_argument("base")
    parser.add_argument("--wait", type=float, default=120.0)
    args = parser.parse_args()
    json.dump(probe(args.base, args.wait), sys.stdout)


if __name__ == "__main__":
    main()
