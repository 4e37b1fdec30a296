"""Cowork Bench on the runner's trial, attacked (review of issue 42's steps).

The agent container's processes outlive the agent's command: ``AgentBox.end_user_processes``
stops nothing (the task's MCP servers run as the agent user), and ``CoworkSteps.collect``
copies the workspace out while the container still runs. A process the agent left behind
can change the workspace under the daemon's archive: a file that shrinks while the daemon
streams it breaks the tar stream (``ArchiveBroken``, a ``CopyFailed``, an ``InfraError``).
``phases._copy_out`` only turns ``CopyRefused`` into the agent's failure, so the broken
stream became ``infra.json`` and the row infrastructure: retried for free, and out of the
scored denominator (DESIGN.md section 8: what the agent caused is never infra). The copy now
runs with every process of the container frozen (``phases.freeze``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.security.runtime_support import security_runtime_args
from tests.support.suite import REPO_ROOT, run_pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]  # ~30-45 s of Cowork in Docker

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "cowork_mini"
IID = "excel-sales-summary"

# Six sparse files that flip between 100 MB and empty, left running after the command
# returns: the daemon's stream of any of them read while it shrinks ends short.
SHRINKER = " ".join(
    f"(while :; do truncate -s 100M f{i}; sleep 0.02; : > f{i}; sleep 0.01; done) "
    "</dev/null >/dev/null 2>&1 &"
    for i in range(6)
)


def test_leftover_process_breaking_copy_out_is_not_infra(tmp_path: Path) -> None:
    command = f"cd /workspace/dumps/workspace && {SHRINKER} sleep 1; echo started"
    run = run_pytest("benchmarks/cowork_bench", tmp_path / "shrink", "--cowork-root",
                     str(FIXTURE), "--cowork-allow-dirty-bench", "--instance", IID,
                     "--agent", "command", "--agent-command", command,
                     *security_runtime_args(), timeout=600)  # fmt: skip
    row = run.latest[IID]
    # the agent's own doing: its failure (or a scored row), never a free infra retry
    assert row["infra"] is False, (row["status"], row["reason_code"], row.get("error"))
    assert row["reason_code"] != "copy_stream_broken", row
