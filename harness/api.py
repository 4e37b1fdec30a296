"""What a declared benchmark may import from the harness: this module, and nothing else
(``tests/test_layers.py`` checks it for ``benchmarks/harbor``; docs/extending/new-benchmark.md).

A benchmark declares its tasks and how one is judged (:class:`DeclaredBenchmark`); the
runner's trial (:mod:`harness.runner.trial`) runs each instance's life around it.
"""

from __future__ import annotations

from harness.agents.base import OraclePlan
from harness.core.adapter import InstanceSpec
from harness.core.errors import InfraError, RefusalError
from harness.core.fsutil import atomic_write_json
from harness.core.models import Outcome
from harness.core.untrusted import read_untrusted_text
from harness.runner.trial import DeclaredBenchmark, SandboxPlan, Trial, Verdict, run_trial

__all__ = [
    "DeclaredBenchmark",
    "InfraError",
    "InstanceSpec",
    "OraclePlan",
    "Outcome",
    "RefusalError",
    "SandboxPlan",
    "Trial",
    "Verdict",
    "atomic_write_json",
    "read_untrusted_text",
    "run_trial",
]
