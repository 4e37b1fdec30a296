"""What a declared benchmark may import from the harness: this module, and nothing else
(``tests/test_layers.py`` checks it; docs/extending/new-benchmark.md).

A benchmark declares its tasks and how one is judged (:class:`DeclaredBenchmark`); the
runner's trial (:mod:`harness.runner.trial`) runs each instance's life around it. The models
and the helpers a benchmark needs only when it runs load on first use: collecting a benchmark's items loads neither
pydantic nor Docker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.core.adapter import InstanceSpec
from harness.core.errors import InfraError, RefusalError
from harness.core.fsutil import atomic_write_json
from harness.runner.trial import (
    DeclaredBenchmark,
    Kept,
    SandboxPlan,
    Trial,
    Verdict,
    run_trial,
)

if TYPE_CHECKING:
    from harness.agents.base import AgentCapabilities, OraclePlan, agent_capabilities
    from harness.core.models import Outcome
    from harness.core.registry import BenchmarkRegistration
    from harness.core.untrusted import read_untrusted_text
    from harness.runner.pull_plugin import pull_settings
    from harness.runner.sandbox_fixtures import copy_limits
    from harness.runner.selection import names_folder
    from harness.runner.worker import item_spec
else:
    from harness.core.lazy import lazy_exports

    __getattr__ = lazy_exports(__name__, {
        "OraclePlan": "harness.agents.base", "Outcome": "harness.core.models",
        "AgentCapabilities": "harness.agents.base",
        "agent_capabilities": "harness.agents.base",  # what an agent kind can do
        "BenchmarkRegistration": "harness.core.registry",
        "read_untrusted_text": "harness.core.untrusted",
        "names_folder": "harness.runner.selection",
        # what a benchmark reads of the runner's own settings and items (never its plugins)
        "item_spec": "harness.runner.worker",  # (benchmark, spec) of a collected item
        "copy_limits": "harness.runner.sandbox_fixtures",  # --max-copy-out-*
        "pull_settings": "harness.runner.pull_plugin"})  # --pull, --image-mirror, pins

__all__ = [
    "AgentCapabilities",
    "BenchmarkRegistration",
    "DeclaredBenchmark",
    "InfraError",
    "InstanceSpec",
    "Kept",
    "OraclePlan",
    "Outcome",
    "RefusalError",
    "SandboxPlan",
    "Trial",
    "Verdict",
    "agent_capabilities",
    "atomic_write_json",
    "copy_limits",
    "item_spec",
    "names_folder",
    "pull_settings",
    "read_untrusted_text",
    "run_trial",
]
