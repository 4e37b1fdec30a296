"""Helpers shared by the Docker tests (``tests.sandbox.sandbox_support``)."""

from __future__ import annotations

import secrets


def new_run_id(tag: str = "t") -> str:
    """A run id unique to one test: ``hxt-<tag>-<8 hex>``."""
    return f"hxt-{tag}-{secrets.token_hex(4)}"
