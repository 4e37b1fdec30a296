"""Cowork Bench's options (``pytest benchmarks/cowork_bench --help``; each carries the
``--cowork-`` prefix) and their typed view, :class:`CoworkOptions` (read once per session by
the adapter, :mod:`.adapter`; the trial's steps, :mod:`.steps`, read it there)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from benchmarks.cowork_bench import PINNED_COMMIT
from benchmarks.cowork_bench.containers import (
    DEFAULT_CPUS,
    DEFAULT_MEMORY,
    DEFAULT_PIDS,
    Limits,
)
from benchmarks.cowork_bench.tasks import FINALPOOL
from harness.api import (
    RefusalError,
    RenamedOption,
    check_positive,
    check_whole,
    refuse_renamed,
)

DEFAULT_TASK_TIMEOUT_SEC = 1800.0  # upstream TASK_TIMEOUT (run_parallel.sh)
DEFAULT_MAX_STEPS = 100  # upstream script default
ADAPTER_VERSION = "cowork-adapter-1"  # bump when the adapter changes what a verdict means
RUN_SCHEMA = "harness.cowork.run.v1"
# The options' spellings before they carried the benchmark's prefix (issue 42): refused,
# naming the new one.
RENAMED = tuple(
    RenamedOption(old, "--cowork-" + old[2:], flag=True)
    for old in (
        "--allow-dirty-bench",
        "--allow-bench-commit-mismatch",
        "--diagnostic-eval-on-truncation",
        "--allow-missing-tools",
        "--allow-missing-db",
        "--build-image",
    )
)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("cowork_bench", "Cowork Bench")
    _add_checkout_options(group)
    _add_policy_options(group)
    _add_agent_options(group)
    _add_container_options(group)
    for option in RENAMED:
        option.register(group)


def _add_checkout_options(group: pytest.OptionGroup) -> None:
    """Which Cowork Bench checkout runs, and what it may differ in."""
    group.addoption(
        "--cowork-root",
        default=None,
        metavar="PATH",
        help="a Cowork Bench checkout (holds tasks/finalpool and db/init.sql.gz); required",
    )
    group.addoption(
        "--cowork-commit",
        default=PINNED_COMMIT,
        metavar="SHA",
        help=f"the commit the checkout must be at (default the pin {PINNED_COMMIT[:12]})",
    )
    group.addoption(
        "--cowork-allow-dirty-bench",
        dest="allow_dirty_bench",
        action="store_true",
        default=False,
        help="run a checkout with uncommitted changes (recorded in the manifest)",
    )
    group.addoption(
        "--cowork-allow-bench-commit-mismatch",
        dest="allow_bench_commit_mismatch",
        action="store_true",
        default=False,
        help="run a checkout at another commit than --cowork-commit (recorded)",
    )


def _add_policy_options(group: pytest.OptionGroup) -> None:
    """What a run does when a task's tools or database are missing, or its agent truncated."""
    group.addoption(
        "--cowork-diagnostic-eval-on-truncation",
        dest="diagnostic_eval_on_truncation",
        action="store_true",
        default=False,
        help="after a truncated agent run, run the checker once more for the "
        "audit only (never changes the verdict)",
    )
    group.addoption(
        "--cowork-allow-missing-tools",
        dest="allow_missing_tools",
        action="store_true",
        default=False,
        help="run a task even when one of its MCP servers cannot start (recorded); by "
        "default such a task is infra_failed mcp_unavailable and its agent never runs",
    )
    group.addoption(
        "--cowork-allow-missing-db",
        dest="allow_missing_db",
        action="store_true",
        default=False,
        help="run a checkout without db/init.sql.gz (e.g. sparse): the database starts "
        "empty, so a task that needs it fails its preprocess or checker (recorded, the run "
        "is not reportable); by default such a run is infra_failed pg_fail",
    )


def _add_agent_options(group: pytest.OptionGroup) -> None:
    """The agent's wall clock and step cap per task."""
    group.addoption(
        "--cowork-task-timeout",
        default=str(DEFAULT_TASK_TIMEOUT_SEC),
        type=check_positive("--cowork-task-timeout", "1800"),
        metavar="SEC",
        help="agent wall clock per task (default 1800, upstream)",
    )
    group.addoption(
        "--cowork-max-steps",
        default=str(DEFAULT_MAX_STEPS),
        type=check_whole("--cowork-max-steps", 1, "100"),
        metavar="N",
        help="agent step cap handed to the agent (default 100, upstream)",
    )


def _add_container_options(group: pytest.OptionGroup) -> None:
    """The images and resource limits of the agent, eval and database containers."""
    group.addoption(
        "--cowork-image",
        default=None,
        metavar="REF",
        help="run the agent and eval containers in REF (e.g. cowork-pack:<commit> from "
        "`harness cowork build-image`) instead of the harness's Debian runtime image",
    )
    group.addoption(
        "--cowork-pg-image",
        default=None,
        metavar="REF",
        help="the PostgreSQL sidecar's image (pulled if missing, per --pull): the official "
        "postgres:15 contract (docker-entrypoint.sh, PGDATA) or the harness's pg15 layout "
        "(default: the harness's Debian postgresql-15 image)",
    )
    group.addoption(
        "--cowork-cpus",
        default=str(DEFAULT_CPUS),
        type=check_positive("--cowork-cpus", "1"),
        metavar="N",
        help=f"CPUs of each Cowork container: agent, eval, database (default {DEFAULT_CPUS:g})",
    )
    group.addoption(
        "--cowork-memory",
        default=DEFAULT_MEMORY,
        type=memory_size,
        metavar="SIZE",
        help=f"memory of each Cowork container, no swap (default {DEFAULT_MEMORY})",
    )
    group.addoption(
        "--cowork-pids",
        default=str(DEFAULT_PIDS),
        type=check_whole("--cowork-pids", 1, "1024"),
        metavar="N",
        help=f"process limit of each Cowork container (default {DEFAULT_PIDS})",
    )


def memory_size(raw: str) -> str:
    """``--cowork-memory``: a size Docker takes (``2g``, ``512m``), lower-cased."""
    value = str(raw).strip().lower()
    if not re.fullmatch(r"[1-9][0-9]*[kmg]?", value):
        raise argparse.ArgumentTypeError(f"{raw!r} is not a size; pass e.g. --cowork-memory 2g")
    return value


def _ref(value: Any) -> str | None:
    return str(value).strip() or None if value else None


class CoworkOptions(BaseModel):
    """The validated options of one session."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    root: Path
    commit: str
    allow_dirty: bool
    allow_commit_mismatch: bool
    diagnostic: bool
    allow_missing_tools: bool = False
    allow_missing_db: bool = False
    task_timeout_sec: float = Field(gt=0)
    max_steps: int = Field(gt=0)
    cpus: float = Field(default=DEFAULT_CPUS, gt=0)
    memory: str = DEFAULT_MEMORY
    pids: int = Field(default=DEFAULT_PIDS, gt=0)
    image: str | None = None  # --cowork-image
    pg_image: str | None = None  # --cowork-pg-image

    @property
    def limits(self) -> Limits:
        return Limits(cpus=self.cpus, memory=self.memory, pids=self.pids)

    @classmethod
    def from_config(cls, config: pytest.Config) -> CoworkOptions:
        """Every problem is one line naming the option (a :class:`RefusalError`)."""
        opt = config.getoption
        refuse_renamed(opt, RENAMED)
        raw_root = opt("cowork_root")
        if not raw_root:
            raise RefusalError(
                "--cowork-root PATH is required: point it at a Cowork Bench checkout "
                "(e.g. a clone of 0717376/cowork_bench, or tests/fixtures/cowork_mini)",
                stage="options",
                reason="cowork_root_missing",
            )
        root = Path(raw_root).expanduser().resolve()
        if not (root / FINALPOOL).is_dir():
            raise RefusalError(
                f"--cowork-root {raw_root}: no {FINALPOOL}/ there; point it at a Cowork Bench "
                f"checkout",
                stage="options",
                reason="bench_root_invalid",
            )
        return cls(
            root=root,
            commit=str(opt("cowork_commit")),
            allow_dirty=bool(opt("allow_dirty_bench")),
            allow_commit_mismatch=bool(opt("allow_bench_commit_mismatch")),
            diagnostic=bool(opt("diagnostic_eval_on_truncation")),
            allow_missing_tools=bool(opt("allow_missing_tools")),
            allow_missing_db=bool(opt("allow_missing_db")),
            task_timeout_sec=float(opt("cowork_task_timeout")),  # checked by their type=
            max_steps=int(opt("cowork_max_steps")),
            cpus=float(opt("cowork_cpus")),
            memory=str(opt("cowork_memory")),
            pids=int(opt("cowork_pids")),
            image=_ref(opt("cowork_image")),
            pg_image=_ref(opt("cowork_pg_image")),
        )

    def applied_config(self) -> dict[str, Any]:
        """The options that change results (they enter the run's config fingerprint)."""
        return {
            "task_timeout_sec": self.task_timeout_sec,
            "max_steps": self.max_steps,
            "diagnostic_eval_on_truncation": self.diagnostic,
            "allow_missing_tools": self.allow_missing_tools,
            **({"allow_missing_db": True} if self.allow_missing_db else {}),
            "expected_commit": self.commit,
            "container_limits": {"cpus": self.cpus, "memory": self.memory, "pids": self.pids},
            **({"cowork_image": self.image} if self.image else {}),
            **({"cowork_pg_image": self.pg_image} if self.pg_image else {}),
        }
