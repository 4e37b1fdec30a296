"""Discover Cowork Bench tasks in a checkout and record where the checkout came from.

Tasks are ``<root>/tasks/finalpool/<name>/task_config.json``; dot-entries (``.utils``,
``.gitignore``) are skipped like the upstream ``ls``. The provenance gate refuses a dirty
checkout or a HEAD other than the expected commit, unless the operator allows it.

A benchmark directory *inside another repository* (our fixture ``tests/fixtures/cowork_mini``)
is ``embedded``: its identity is the containing repository's HEAD plus the git tree id of the
subdirectory, and "dirty" means a change or untracked file under that subdirectory only. The
upstream pin does not apply to it (it is not the upstream repository); the clean-tree rule
does, unless ``allow_dirty``.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from benchmarks.cowork_bench import PINNED_COMMIT
from harness.api import INSTANCE_ID_RE, RefusalError

FINALPOOL = Path("tasks") / "finalpool"
_MARKER_SAFE = re.compile(r"[^A-Za-z0-9_]")


class CoworkTask(BaseModel):
    """One task of the checkout, as the runner needs it (no task text, no answers)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    instance_id: str
    servers: tuple[str, ...]
    local_tools: tuple[str, ...]
    has_initial_workspace: bool
    has_groundtruth: bool
    prefix: str
    max_turns: int | None = None

    def module(self, part: Literal["preprocess", "evaluation"]) -> str:
        """The ``python -m`` module of this task's preprocess or checker."""
        return f"tasks.finalpool.{self.instance_id}.{part}.main"

    def keywords(self) -> list[str]:
        """Extra ``-k`` words: ``server_pdf_tools``, ``prefix_rzd``."""
        words = [f"server_{_MARKER_SAFE.sub('_', s)}" for s in self.servers]
        words.append(f"prefix_{_MARKER_SAFE.sub('_', self.prefix)}")
        return words


class TaskConfigError(ValueError):
    """A ``task_config.json`` is unreadable or has the wrong shape."""


def task_dir(root: Path, instance_id: str) -> Path:
    return Path(root) / FINALPOOL / instance_id


def _load_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TaskConfigError(f"{path}: unreadable task config ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("needed_mcp_servers"), list):
        raise TaskConfigError(f"{path}: task config needs a 'needed_mcp_servers' list")
    return data


def load_task(root: Path, instance_id: str) -> CoworkTask:
    tdir = task_dir(root, instance_id)
    data = _load_config(tdir / "task_config.json")
    if not INSTANCE_ID_RE.match(instance_id):
        raise TaskConfigError(f"{tdir}: task name is not a valid instance id")
    gt = tdir / "groundtruth_workspace"
    return CoworkTask(
        instance_id=instance_id,
        servers=tuple(str(s) for s in data["needed_mcp_servers"]),
        local_tools=tuple(str(s) for s in data.get("needed_local_tools") or ()),
        has_initial_workspace=(tdir / "initial_workspace").is_dir(),
        has_groundtruth=gt.is_dir() and any(p.name != ".gitkeep" for p in gt.iterdir()),
        prefix=instance_id.split("-", 1)[0],
        max_turns=data.get("max_turns"),
    )


@dataclass(frozen=True)
class TaskDocs:
    """A task's ``docs/agent_system_prompt.md`` (placeholder unfilled) and ``docs/task.md``;
    read once per instance and handed to the instruction, the task body and the agent phase."""

    system_prompt: str
    task: str


def read_docs(root: Path, instance_id: str) -> TaskDocs:
    docs = task_dir(root, instance_id) / "docs"
    return TaskDocs(
        system_prompt=(docs / "agent_system_prompt.md").read_text(encoding="utf-8"),
        task=(docs / "task.md").read_text(encoding="utf-8"),
    )


def discover_tasks(root: Path) -> list[CoworkTask]:
    """All tasks of the checkout, sorted by name. Refuses a root without ``tasks/finalpool``."""
    pool = Path(root) / FINALPOOL
    if not pool.is_dir():
        raise RefusalError(
            f"--cowork-root {root}: no {FINALPOOL}/ here; point it at a Cowork Bench checkout",
            stage="task_discovery",
            reason="bench_root_invalid",
        )
    names = sorted(
        entry.name
        for entry in pool.iterdir()
        if not entry.name.startswith(".") and (entry / "task_config.json").is_file()
    )
    return [load_task(root, name) for name in names]


# --------------------------------------------------------------------------- provenance


class BenchProvenance(BaseModel):
    """Where the benchmark tree came from (``harness.bench`` of the run manifest)."""

    model_config = ConfigDict(extra="forbid")

    bench_root: str
    kind: Literal["checkout", "embedded", "plain"]
    head: str | None = None
    repo_root: str | None = None
    subtree: str | None = None  # path of bench_root inside repo_root (embedded)
    tree: str | None = None  # git tree id of the subtree at HEAD (embedded)
    dirty: bool | None = None
    status_entries: list[str] = Field(default_factory=list)
    expected: str | None = None
    error: str | None = None


def _git(root: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip() or f"git {args[0]} exited {proc.returncode}")
    return proc.stdout


def bench_provenance(root: Path, expected: str | None = PINNED_COMMIT) -> BenchProvenance:
    root = Path(root).resolve()
    try:
        top = Path(_git(root, "rev-parse", "--show-toplevel").strip()).resolve()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return BenchProvenance(
            bench_root=str(root), kind="plain", expected=expected, error=str(exc)
        )
    try:
        head = _git(root, "rev-parse", "HEAD").strip()
        rel = root.relative_to(top).as_posix()
        status = _git(root, "status", "--porcelain", "--untracked-files=all", "--", ".")
        entries = [line for line in status.splitlines() if line.strip()]
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return BenchProvenance(
            bench_root=str(root),
            kind="plain",
            repo_root=str(top),
            expected=expected,
            error=str(exc),
        )
    tree = None
    if top != root:
        try:  # absent when the subtree is not committed yet (then it is dirty anyway)
            tree = _git(top, "rev-parse", f"HEAD:{rel}").strip()
        except (RuntimeError, OSError, subprocess.TimeoutExpired):
            tree = None
    return BenchProvenance(
        bench_root=str(root),
        kind="checkout" if top == root else "embedded",
        head=head,
        repo_root=str(top),
        subtree=None if top == root else rel,
        tree=tree,
        dirty=bool(entries),
        status_entries=entries[:50],
        expected=expected if top == root else None,
    )


def check_provenance(
    prov: BenchProvenance, *, allow_dirty: bool = False, allow_other_commit: bool = False
) -> None:
    """Refuse (one line, naming the fix) unless the checkout is clean and at the expected pin."""
    root = prov.bench_root
    if prov.kind == "plain":
        if not allow_dirty:
            raise RefusalError(
                f"--cowork-root {root} is not a git checkout ({prov.error}); clone the "
                "benchmark at the pinned commit or pass --cowork-allow-dirty-bench",
                stage="bench_gate",
                reason="bench_identity_unavailable",
            )
        return
    if prov.dirty and not allow_dirty:
        first = prov.status_entries[0].strip() if prov.status_entries else "?"
        raise RefusalError(
            f"--cowork-root {root} has {len(prov.status_entries)} uncommitted change(s) "
            f"(first: {first}); clean it (git stash / git clean) or pass --cowork-allow-dirty-bench",
            stage="bench_gate",
            reason="bench_dirty",
        )
    mismatch = prov.kind == "checkout" and prov.expected and prov.head != prov.expected
    if mismatch and not allow_other_commit:
        raise RefusalError(
            f"--cowork-root {root} is at {prov.head} but the pinned commit is "
            f"{prov.expected}; run `git -C {root} checkout {prov.expected}` or pass "
            "--cowork-allow-bench-commit-mismatch",
            stage="bench_gate",
            reason="bench_mismatch",
        )


def bench_version(prov: BenchProvenance) -> str:
    """A short identity for the run manifest's ``benchmark_versions``."""
    if prov.kind == "checkout" and prov.head:
        return prov.head + ("+dirty" if prov.dirty else "")
    if prov.kind == "embedded" and prov.tree:
        return f"tree:{prov.tree}" + ("+dirty" if prov.dirty else "")
    return "unversioned"
