"""Fixtures of the agent tests: reference servers (real subprocesses on 127.0.0.1), a fast
poll policy, and Docker sandboxes from ``harness.sandbox``."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.agents.gateway.client import PollPolicy
from tests.agents.agents_support import FAST, RefServer, start_server


@pytest.fixture
def ref_server(tmp_path: Path) -> Iterator[Callable[..., RefServer]]:
    """``ref_server(config_dict)`` starts a reference server subprocess; stopped after."""
    servers: list[RefServer] = []

    def _start(
        config: dict[str, Any] | None = None, env: dict[str, str] | None = None
    ) -> RefServer:
        server = start_server(tmp_path / "servers", config, env)
        servers.append(server)
        return server

    yield _start
    for server in servers:
        server.stop()


@pytest.fixture
def fast_policy() -> PollPolicy:
    return FAST


@pytest.fixture
def sandbox_factory(
    tmp_path: Path, sandbox_client: Any, sandbox_base_image: Any
) -> Iterator[Callable[..., Any]]:
    """Real Docker sandboxes (``harness.sandbox``) on the shared base image; removed after.

    The session's client and base image come from :mod:`harness.runner.sandbox_fixtures` (loaded
    by the harness plugin). No Docker means an error, never a skip.
    """
    from harness.sandbox.container import Sandbox, SandboxSpec

    made: list[Any] = []
    run_id = f"agents-test-{uuid.uuid4().hex[:8]}"

    def _make(user: str = "1000:1000", workdir: str = "/workspace", **spec: Any) -> Any:
        sb = Sandbox.create(
            SandboxSpec(
                image=sandbox_base_image.image_id,
                run_id=run_id,
                instance_id=f"i{len(made)}",
                run_root=tmp_path,
                user=user,
                workdir=workdir,
                ttl_s=600,
                **spec,
            ),
            client=sandbox_client,
        )
        made.append(sb)
        sb.exec(
            ["/bin/sh", "-c", f"mkdir -p {workdir} && chown {user} {workdir}"],
            user="root",
            timeout=30,
        ).check()
        return sb

    yield _make
    for sb in made:
        sb.remove()
