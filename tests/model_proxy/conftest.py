"""The scripted upstream the gateway tests forward to."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.testing.fake_model_server import FakeModelServer, start_fake_model_server
from tests.agents.model_scripts import step


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[FakeModelServer]:
    """A fake model answering every call with one step (300 prompt, 20 completion tokens),
    its requests logged to ``up.jsonl``."""
    server = start_fake_model_server(
        {"responses": [step("ls", prompt=300, completion=20)], "loop": True},
        log=tmp_path / "up.jsonl",
    )
    yield server
    server.stop()
