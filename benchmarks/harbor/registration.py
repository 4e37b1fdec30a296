"""The Harbor format's registration with the core (entry point ``harness.benchmarks``): its
folder's conftest loads with the others (``pytest benchmarks``); no command, no images of
its own (each task folder's image is built when its instance runs)."""

from __future__ import annotations

from harness.api import BenchmarkRegistration

REGISTRATION = BenchmarkRegistration(name="harbor")
