"""Fixtures of the budget tests: a fresh campaign (on each store: a file, and a campaign
in a real PostgreSQL server, ``postgres`` marker), a loopback HTTP key endpoint."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from harness.budget import Campaign
from tests.budget.budget_support import BASELINE, FINGERPRINT, KeyEndpoint
from tests.budget.pg_support import PgServer, serving


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "postgres: needs a PostgreSQL server (initdb, pg_ctl); fails without one"
    )


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One PostgreSQL server per test process (no server here: the test fails loudly)."""
    yield from serving()


@pytest.fixture
def campaign_path(tmp_path: Path) -> Path:
    return tmp_path / "campaigns" / "campaign.json"


@pytest.fixture(params=["file", pytest.param("postgres", marks=pytest.mark.postgres)])
def campaign_where(request: pytest.FixtureRequest, campaign_path: Path) -> Path | str:
    """Where ``make_campaign`` keeps the campaign: each test runs on both stores (a test
    of the file store alone: ``@pytest.mark.parametrize("campaign_where", ["file"],
    indirect=True)``)."""
    if request.param == "file":
        return campaign_path
    server: PgServer = request.getfixturevalue("pg_server")
    return server.url(f"t-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def make_campaign(campaign_where: Path | str) -> Callable[..., Campaign]:
    def make(ceiling_usd: float = 100.0, **kw: Any) -> Campaign:
        kw.setdefault("key_fingerprint", FINGERPRINT)
        kw.setdefault("baseline_usage", BASELINE)
        return Campaign.open_or_create(campaign_where, ceiling_usd=ceiling_usd, **kw)

    return make


@pytest.fixture
def run_root(tmp_path: Path) -> Path:
    root = tmp_path / "runs" / "run-1"
    root.mkdir(parents=True)
    return root


@pytest.fixture
def key_endpoint() -> Iterator[KeyEndpoint]:
    release = threading.Event()
    endpoint = KeyEndpoint(base_url="")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            endpoint.requests.append({k.lower(): v for k, v in self.headers.items()})
            if endpoint.on_request is not None:
                endpoint.on_request()
            if endpoint.delay_sec:
                release.wait(endpoint.delay_sec)
            if self.path != "/api/v1/key":
                self.send_error(404)
                return
            body = json.dumps(
                {"data": {"usage": endpoint.usage, "limit_remaining": endpoint.limit_remaining}}
            ).encode()
            try:
                self.send_response(endpoint.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:
                pass  # the client gave up (timeout tests)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    endpoint.base_url = f"http://127.0.0.1:{server.server_address[1]}/api/v1"
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield endpoint
    finally:
        release.set()
        server.shutdown()
        server.server_close()
