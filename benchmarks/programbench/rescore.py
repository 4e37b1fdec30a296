"""Resume re-scores, it does not re-solve (issue 14 point 2).

An instance whose agent finished and left a ``submission.tar.gz``, but whose official eval
errored (``official_eval_error``), never ran (a batch eval cut short), or was switched off,
is not given to the agent again on resume: the nearest ancestor's kept submission is copied
into the new instance folder (after checking its sha256 against the ancestor's row) and
scored. ``--pb-redo-existing`` forces a new solve.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from harness.api import (
    AgentDetails,
    EngineDetails,
    EvalDetails,
    InstanceContext,
    RowDetails,
    hash_untrusted_file,
    ledger_path,
    read_ledger,
    read_manifest,
)

RESCORABLE_REASONS = frozenset({"official_eval_error", "eval_pending", "submission_prepared"})
COPIED = ("submission.tar.gz", "submission_info.json", "scorer_guard.json")


@dataclass(frozen=True)
class KeptSubmission:
    run_root: Path
    instance_dir: Path
    completed: bool
    reason: str | None
    sha256: str
    details: RowDetails


def _agent_state(details: RowDetails) -> tuple[bool, str | None] | None:
    for state in (details.agent.outcome, details.eval.pending):
        if isinstance(state, dict) and isinstance(state.get("completed"), bool):
            reason = state.get("reason")
            return state["completed"], reason if isinstance(reason, str) else None
    return None


def find_kept_submission(ctx: InstanceContext) -> KeptSubmission | None:
    """The nearest ancestor's submission this instance can be scored from, if any."""
    if ctx.key not in ctx.run.plan.attempts:
        return None
    try:
        ancestors = [Path(p) for p in read_manifest(ctx.run_root).resume.ancestors]
    except Exception:  # the runner's own manifest: unreadable means no recovery
        return None
    for root in ancestors:
        row = read_ledger(ledger_path(root)).latest.get(ctx.key)
        if row is None:
            continue
        state = _agent_state(row.details)
        submission = row.details.submission
        if (row.reason_code not in RESCORABLE_REASONS or state is None
                or submission.is_empty()):
            continue
        src = root / ctx.benchmark / ctx.instance_id
        kept = src / "submission.tar.gz"
        want = submission.sha256_scored or submission.sha256
        if not kept.is_file() or kept.is_symlink() or not want or hash_untrusted_file(kept)[0] != want:
            continue
        return KeptSubmission(run_root=root, instance_dir=src, completed=state[0],
                              reason=state[1], sha256=str(want), details=row.details)
    return None


def adopt(ctx: InstanceContext, kept: KeptSubmission) -> Path:
    """Copy the kept submission (and its descriptions) into this instance folder."""
    for name in COPIED:
        src = kept.instance_dir / name
        if src.is_file() and not src.is_symlink():
            shutil.copyfile(src, ctx.instance_dir / name)
    dest = ctx.instance_dir / "submission.tar.gz"
    ctx.output("submission", dest)
    ctx.result.prediction_written = True
    was = kept.details  # the submission as collected, what ran the agent, and on which image
    was.submission.put(ctx.result.details)
    AgentDetails.model_validate(was.agent.model_dump(include={"kind", "outcome"},
                                                     exclude_unset=True)).put(ctx.result.details)
    if was.engine.image is not None:
        EngineDetails(image=was.engine.image).put(ctx.result.details)
    EvalDetails(rescored_from={"run_root": str(kept.run_root), "sha256": kept.sha256}
                ).put(ctx.result.details)
    return dest
