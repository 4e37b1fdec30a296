"""Cowork Bench's registration with the core (entry point ``harness.benchmarks``)."""

from __future__ import annotations

from harness.api import BenchmarkRegistration, ImageStep


def _images() -> object:
    from benchmarks.cowork_bench.images import ensure_image

    return [ensure_image("pg15"), ensure_image("runtime")]


REGISTRATION = BenchmarkRegistration(
    name="cowork",
    command=(
        "benchmarks.cowork_bench.cli",
        "cowork_command",
        "Cowork Bench tools: audit, qualify, build-image, build-servers",
    ),
    images=(ImageStep("Cowork Bench PostgreSQL 15 and runtime", _images),),
)
