"""``harness cowork ...``: Cowork Bench tools (``audit``, ``qualify``, ``build-image``,
``build-servers``)."""

from __future__ import annotations

from collections.abc import Sequence

from harness.api import dispatch

COMMANDS = {
    "audit": (
        "benchmarks.cowork_bench.audit",
        "audit_command",
        "audit a finished run: classifications, eval attempts, manual-review flags",
    ),
    "qualify": (
        "benchmarks.cowork_bench.qualify",
        "qualify_command",
        "start each task's MCP servers, list their tools: ready or why not (--all: every "
        "task, once per server set, and a table)",
    ),
    "build-image": (
        "benchmarks.cowork_bench.build_image",
        "build_image_command",
        "build the checkout's own image (its root Dockerfile, untouched) as "
        "cowork-pack:<commit>, then the harness's layer on it (harness/cowork-pack:...)",
    ),
    "build-servers": (
        "benchmarks.cowork_bench.servers_image",
        "build_servers_command",
        "offline fallback: the runtime image with the checkout's Python and Node MCP servers",
    ),
}


def doc_summary(doc: str | None) -> str:
    """A command module's docstring's first paragraph, as one line (its ``--help`` text)."""
    return " ".join((doc or "").split("\n\n")[0].split())


def cowork_command(argv: Sequence[str]) -> int:
    return dispatch("harness cowork", COMMANDS, argv)
