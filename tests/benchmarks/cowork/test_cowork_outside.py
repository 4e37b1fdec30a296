"""Outside agent servers reach the tools (issue 26 point 3), on Docker.

``--agent gateway`` with the reference agent server on the host: the server is outside the
task's internal network, and its plan calls the task's MCP tools itself, over HTTP, through
the URLs the task body names (``metadata.mcp_http_urls``): the per-attempt tool route (a
token proxy on the host's loopback, a relay container on the task network). The real
checker passes the task; the route is gone with the attempt.

Isolation, with two instances whose routes are open at once (instance B runs inside
instance A's agent step): B's route refuses A's token, no token and a wrong one, and has
no path to a server B does not have; B's relay cannot even resolve A's agent container;
the host cannot reach either container by name. A's tools, called through A's route, act
on A's database only: A passes its check, B (whose agent did nothing) fails its own.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from benchmarks.cowork_bench.agents import AgentBox
from benchmarks.cowork_bench.containers import RunIdentity
from benchmarks.cowork_bench.instance import InstanceResult, run_instance
from benchmarks.cowork_bench.mcp_access import route_request
from benchmarks.cowork_bench.phases import AgentContext, AgentOutcome
from benchmarks.cowork_bench.tasks import load_task
from harness.agents.gateway.tool_route import RouteRequest, ToolRoute, open_for
from harness.agents.reference_server.mcp_client import call_tool, result_text
from harness.sandbox import leaked_resources, run_lock
from tests.agents.agents_support import start_server
from tests.benchmarks.cowork.cowork_helpers import FIXTURE
from tests.benchmarks.cowork.cowork_run_support import FAST_DNS
from tests.benchmarks.cowork.cowork_seed_support import labelled
from tests.support.suite import run_pytest

pytestmark = pytest.mark.docker

TARGET = "benchmarks/cowork_bench"
GCAL, MAIL = "gcal-standup-week", "email-reply-invoice"
DAYS = ("2026-03-03", "2026-03-04", "2026-03-05")


def standup(day: str) -> dict[str, str]:
    return {"summary": "Daily standup", "start": f"{day}T09:30:00+00:00",
            "end": f"{day}T09:45:00+00:00"}  # fmt: skip


def test_an_agent_server_on_the_host_calls_the_task_tools_through_the_route(
    tmp_path: Path,
) -> None:
    plan = {"steps": [{"mcp": {"server": "google_calendar", "tool": "create_event",
                               "arguments": standup(d)}, "cost_usd": 0.001} for d in DAYS]
            + [{"mcp": {"server": "google_calendar", "tool": "list_events",
                        "arguments": {"day": DAYS[1]}}}]}  # fmt: skip
    server = start_server(tmp_path / "server", {"default_plan": plan})
    try:
        run = run_pytest(TARGET, tmp_path / "run", "--cowork-root", str(FIXTURE),
                         "--cowork-allow-dirty-bench", "--instance", GCAL, "--agent", "gateway",
                         "--gateway-url", server.url, "--gateway-poll-sec", "0.2",
                         timeout=600)  # fmt: skip
        state = server.state()
    finally:
        server.stop()
    assert run.rc == 0, run.out
    row = run.latest[GCAL]
    assert (row["status"], row["resolved"]) == ("passed", True), row
    (task,) = state["tasks"].values()
    assert task == "completed"
    route = row["details"]["agent"]["details"]["tool_route"]
    assert route["refused"] == 0 and route["forwarded"] >= 4 * len(plan["steps"])
    assert sorted(route["paths"]) == ["/emails/mcp", "/filesystem/mcp", "/google_calendar/mcp"]
    agent_dir = run.root / "cowork_bench" / GCAL / "runner_agent"
    record = json.loads((agent_dir / "tool_route.json").read_text())
    body = json.loads((agent_dir / "cowork_bench_task_body.json").read_text())
    urls = dict(kv.split("=", 1) for kv in body["metadata"]["mcp_http_urls"].split(","))
    assert set(urls) == {"google_calendar", "emails", "filesystem"}
    url = urls["google_calendar"]
    assert url.startswith(record["base_url"] + "/") and url.endswith("/google_calendar/mcp/")
    assert record["token_sha256"].startswith("sha256:") and record["closed_at"]
    token = url.split("/")[3]
    assert token not in json.dumps(record)  # the record names its fingerprint only
    with pytest.raises(httpx.TransportError):  # the route went with the attempt
        httpx.post(url, json={}, timeout=5, trust_env=False)
    assert labelled(run.manifest["run_id"]) == []


# --------------------------------------------------------------------------- isolation


@pytest.fixture
def ident(tmp_path: Path) -> Iterator[RunIdentity]:
    ident = RunIdentity(f"cowork-route-{secrets.token_hex(4)}", tmp_path)
    with run_lock(tmp_path).acquire(timeout=0):
        yield ident
    assert leaked_resources(run_id_prefix=ident.run_id) == {
        "containers": [], "networks": [], "volumes": []}  # fmt: skip


def open_route(ctx: AgentContext) -> ToolRoute:
    """The route the gateway agent would open for this attempt."""
    wanted = route_request(ctx.mcp)
    assert wanted is not None
    return open_for(AgentBox(ctx.container), RouteRequest.model_validate(wanted))


def status(url: str, **headers: str) -> int:
    return httpx.post(url, json={}, headers=headers, timeout=10, trust_env=False).status_code


@pytest.mark.slow  # one of the default tier's longest (durations.json); CI runs it in the slow tier
def test_a_route_reaches_its_own_instance_only(tmp_path: Path, ident: RunIdentity) -> None:
    seen: dict[str, Any] = {}
    results: dict[str, InstanceResult] = {}

    def inner(ctx: AgentContext) -> AgentOutcome:  # instance B: both routes are open now
        a: ToolRoute = seen["route_a"]
        b = open_route(ctx)
        try:
            token_a, token_b = a.proxy.token, b.proxy.token
            seen["a_token_on_b"] = status(f"{b.base_url}/{token_a}/emails/mcp/")
            seen["no_token"] = status(f"{b.base_url}/emails/mcp/")
            seen["wrong_bearer"] = status(f"{b.base_url}/emails/mcp/",
                                          Authorization=f"Bearer {token_b[:-1]}x")  # fmt: skip
            seen["b_has_no_calendar"] = status(b.url("/google_calendar/mcp/"))
            seen["b_status_page"] = status(b.url("/status"))
            a_box = seen["container_a"]
            code = (
                "import urllib.request\ntry:\n"
                f" urllib.request.urlopen('http://{a_box}:8765/status', timeout=3)\n"
                " print('reached')\nexcept Exception as e:\n print(type(e).__name__)"
            )
            relay = ctx.container.client.containers.get(b.relay_id)
            probe = relay.exec_run(["python3", "-c", code], environment=FAST_DNS)
            seen["b_relay_to_a"] = probe.output.decode().strip()
            seen["b_tools"] = call_tool(b.url("/emails/mcp/"), "get_emails", {"folder": "INBOX"})
            for day in DAYS:  # A's calendar, through A's route
                seen.setdefault("created", []).append(
                    result_text(call_tool(a.url("/google_calendar/mcp/"), "create_event",
                                          standup(day))))  # fmt: skip
            try:
                httpx.get(f"http://{a_box}:8765/status", timeout=3, trust_env=False)
                seen["host_to_a"] = "reached"
            except httpx.TransportError as exc:
                seen["host_to_a"] = type(exc).__name__
        finally:
            seen["record_b"] = b.close()
        return AgentOutcome(status="success", reason_code="route_probe")

    def outer(ctx: AgentContext) -> AgentOutcome:  # instance A
        seen["route_a"], seen["container_a"] = open_route(ctx), ctx.container.name
        try:
            results[MAIL] = run_instance(load_task(FIXTURE, MAIL), FIXTURE, tmp_path / MAIL,
                                         inner, "inner", ident=ident)  # fmt: skip
        finally:
            seen["record_a"] = seen["route_a"].close()
        return AgentOutcome(status="success", reason_code="route_holder")

    results[GCAL] = run_instance(load_task(FIXTURE, GCAL), FIXTURE, tmp_path / GCAL, outer,
                                 "outer", ident=ident)  # fmt: skip
    for iid, res in results.items():
        assert res.summary is not None and not res.summary.infra_failed, (iid, res.summary)
    assert (seen["a_token_on_b"], seen["no_token"], seen["wrong_bearer"]) == (401, 401, 401)
    assert (seen["b_has_no_calendar"], seen["b_status_page"]) == (404, 404)
    assert seen["b_relay_to_a"] in ("URLError", "gaierror"), seen["b_relay_to_a"]
    assert seen["host_to_a"] == "ConnectError"
    assert not seen["b_tools"]["isError"]  # B's own tools answer through B's route
    assert all(text.startswith("created event") for text in seen["created"]), seen["created"]
    gcal, mail = results[GCAL].eval, results[MAIL].eval
    assert gcal is not None and gcal.passed is True  # A's events, in A's database
    assert mail is not None and mail.passed is False  # B's agent did nothing
    assert seen["record_b"].refused == 5 and seen["record_a"].forwarded == 4 * len(DAYS)
