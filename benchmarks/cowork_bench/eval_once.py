"""The official eval phase, at most once per attempt.

Before the checker runs, ``eval_claim.json`` is published with an exclusive create (a fully
written, fsynced temp file hard-linked into place): it names a random attempt id and binds the
inputs (traj log, task config, evaluator files, groundtruth, workspace) by sha256. After the
checker, ``eval_receipt-<attempt>.json`` records exit code, output tails and the verdict.

On re-entry the checker never runs again: a claim with a receipt replays it; a claim without
one is ``unfinished_claim``; inputs that changed since the claim are ``binding_mismatch``; an
``eval_res.json`` that predates any claim is kept and reported as ``unclaimed_prior_result``.
The checker's ``--res_log_file`` points at a scratch file (upstream checkers overwrite it).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

from benchmarks.cowork_bench import models as m
from benchmarks.cowork_bench.tasks import task_dir
from harness.api import atomic_write_json, create_exclusive, hash_untrusted_file, is_regular_file

TAIL_CHARS = 4000


class CheckerRequest(BaseModel):
    instance_id: str
    attempt_id: str
    module: str  # tasks.finalpool.<task>.evaluation.main
    launch_time: str  # "YYYY-mm-dd HH:MM:SS"
    workspace: str  # host path of the copied-out agent workspace
    scratch_dir: str  # host dir for the checker's --res_log_file copy and logs
    has_groundtruth_dir: bool


class CheckerRun(BaseModel):
    exit_code: int
    stdout: str = ""
    stderr: str = ""
    res_log_path: str | None = None  # host copy of the scratch --res_log_file, if any


CheckerRunner = Callable[[CheckerRequest], CheckerRun]
_ReceiptOf = Callable[..., m.EvalReceipt]  # an attempt's receipt from its fields


class EvalOutcome(BaseModel):
    kind: Literal[
        "evaluated",
        "declined",
        "error",
        "replayed",
        "unfinished_claim",
        "binding_mismatch",
        "unclaimed_prior_result",
    ]
    attempt_id: str | None = None
    receipt: m.EvalReceipt | None = None
    mismatched: list[str] = []

    @property
    def passed(self) -> bool | None:
        return self.receipt.pass_ if self.receipt else None


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# --------------------------------------------------------------------------- facts


def file_fact(path: Path) -> m.FileFact:
    """A regular file's size and sha256 (streamed, no link followed); else ``absent``."""
    if is_regular_file(path):
        try:
            digest, size = hash_untrusted_file(path)
        except OSError:
            return m.FileFact(path=str(path), state="absent", kind="none")
        return m.FileFact(path=str(path), state="present", kind="file", bytes=size, sha256=digest)
    return m.FileFact(path=str(path), state="absent", kind="none")


def tree_fact(path: Path) -> m.FileFact:
    """Digest of a directory: sha256 over sorted (relative path, kind, content hash).

    Links are digested by their text (never followed); special files by their kind only.
    """
    if not path.is_dir() or path.is_symlink():
        return m.FileFact(path=str(path), state="absent", kind="none")
    outer = hashlib.sha256()
    total = count = 0
    for entry in sorted(path.rglob("*")):
        rel = entry.relative_to(path).as_posix()
        if "__pycache__" in entry.parts:
            continue
        if entry.is_symlink():
            outer.update(f"L {rel} {os.readlink(entry)}\n".encode())
        elif is_regular_file(entry):
            fact = file_fact(entry)
            total += fact.bytes
            count += 1
            outer.update(f"F {rel} {fact.sha256}\n".encode())
        elif entry.is_dir():
            outer.update(f"D {rel}\n".encode())
        else:
            outer.update(f"S {rel}\n".encode())
    return m.FileFact(
        path=str(path),
        state="present",
        kind="tree",
        bytes=total,
        sha256=outer.hexdigest(),
        files=count,
    )


def bindings(inst_dir: Path, bench_root: Path, instance_id: str) -> dict[str, m.FileFact]:
    tdir = task_dir(bench_root, instance_id)
    return {
        "traj_log": file_fact(inst_dir / m.TRAJ_LOG),
        "task_config": file_fact(tdir / "task_config.json"),
        "evaluator": tree_fact(tdir / "evaluation"),
        "groundtruth": tree_fact(tdir / "groundtruth_workspace"),
        "workspace": tree_fact(inst_dir / m.WORKSPACE_DIR),
    }


def _same(a: m.FileFact, b: m.FileFact) -> bool:
    return (a.state, a.kind, a.sha256, a.bytes) == (b.state, b.kind, b.sha256, b.bytes)


# --------------------------------------------------------------------------- exclusive files


def publish_exclusive(path: Path, model: BaseModel) -> bool:
    """Create ``path`` with the model's JSON only if it does not exist (hard-link publish).

    Returns False when the file already exists. Readers never see a partial file.
    """
    return create_exclusive(path, (model.model_dump_json(by_alias=True, indent=2) + "\n").encode())


def read_claim(inst_dir: Path) -> m.EvalClaim | None:
    path = inst_dir / m.EVAL_CLAIM
    if not path.exists():
        return None
    return m.EvalClaim.model_validate_json(path.read_bytes())


def read_receipt(inst_dir: Path, attempt_id: str) -> m.EvalReceipt | None:
    path = inst_dir / m.receipt_name(attempt_id)
    if not path.exists():
        return None
    return m.EvalReceipt.model_validate_json(path.read_bytes())


# --------------------------------------------------------------------------- the phase


def _launch_time(traj: m.TrajLog | None) -> str:
    raw = (traj.config.launch_time if traj else None) or ""
    return " ".join(raw.split()[:2])  # upstream strips the weekday


def checker_request(
    inst_dir: Path,
    instance_id: str,
    attempt_id: str,
    scratch_dir: Path,
    traj: m.TrajLog | None,
    has_groundtruth_dir: bool,
) -> CheckerRequest:
    """The checker run over this folder's workspace (official eval and residual diagnostic)."""
    return CheckerRequest(
        instance_id=instance_id,
        attempt_id=attempt_id,
        module=f"tasks.finalpool.{instance_id}.evaluation.main",
        launch_time=_launch_time(traj),
        workspace=str(inst_dir / m.WORKSPACE_DIR),
        scratch_dir=str(scratch_dir),
        has_groundtruth_dir=has_groundtruth_dir,
    )


def _reenter(inst_dir: Path, claim: m.EvalClaim, current: dict[str, m.FileFact]) -> EvalOutcome:
    mismatched = sorted(
        k
        for k in set(claim.bindings) | set(current)
        if k not in claim.bindings or k not in current or not _same(claim.bindings[k], current[k])
    )
    if mismatched:
        return EvalOutcome(
            kind="binding_mismatch", attempt_id=claim.attempt_id, mismatched=mismatched
        )
    receipt = read_receipt(inst_dir, claim.attempt_id)
    if receipt is None:
        return EvalOutcome(kind="unfinished_claim", attempt_id=claim.attempt_id)
    return EvalOutcome(kind="replayed", attempt_id=claim.attempt_id, receipt=receipt)


def evaluate_once(
    inst_dir: Path, bench_root: Path, instance_id: str, runner: CheckerRunner
) -> EvalOutcome:
    """Run the official checker for this instance at most once; see the module docstring."""
    inst_dir = Path(inst_dir)
    current = bindings(inst_dir, Path(bench_root), instance_id)
    claim = read_claim(inst_dir)
    if claim is not None:
        return _reenter(inst_dir, claim, current)
    if (inst_dir / m.EVAL_RES).exists():
        return EvalOutcome(kind="unclaimed_prior_result")
    claim = m.EvalClaim(
        attempt_id=secrets.token_hex(16),
        instance_id=instance_id,
        created_at=now_iso(),
        pid=os.getpid(),
        bindings=current,
    )
    if not publish_exclusive(inst_dir / m.EVAL_CLAIM, claim):
        raced = read_claim(inst_dir)
        assert raced is not None
        return _reenter(inst_dir, raced, current)

    receipt, eval_res = _attempt(inst_dir, instance_id, claim, current, runner)
    if not publish_exclusive(inst_dir / m.receipt_name(claim.attempt_id), receipt):
        raise RuntimeError(f"receipt for attempt {claim.attempt_id} already exists")
    atomic_write_json(inst_dir / m.EVAL_RES, eval_res)
    kind: Literal["evaluated", "declined", "error"] = (
        "evaluated" if receipt.state == "completed" else receipt.state
    )
    return EvalOutcome(kind=kind, attempt_id=claim.attempt_id, receipt=receipt)


def _receipt_maker(attempt_id: str, instance_id: str) -> _ReceiptOf:
    """The attempt's receipt from its fields, timed from now."""
    started_at, t0 = now_iso(), time.monotonic()

    def receipt_of(**fields: object) -> m.EvalReceipt:
        return m.EvalReceipt.model_validate(
            {
                "attempt_id": attempt_id,
                "instance_id": instance_id,
                "started_at": started_at,
                "completed_at": now_iso(),
                "duration_s": time.monotonic() - t0,
                **fields,
            }
        )

    return receipt_of


def _attempt(
    inst_dir: Path,
    instance_id: str,
    claim: m.EvalClaim,
    current: dict[str, m.FileFact],
    runner: CheckerRunner,
) -> tuple[m.EvalReceipt, dict[str, object]]:
    """The claimed attempt: its receipt and ``eval_res.json`` (the checker runs only after a
    successful agent run, as upstream's status gate)."""
    receipt_of = _receipt_maker(claim.attempt_id, instance_id)
    traj: m.TrajLog | None = None
    try:
        traj = m.TrajLog.model_validate_json((inst_dir / m.TRAJ_LOG).read_bytes())
    except (OSError, ValidationError, ValueError) as exc:
        traj_error = f"{type(exc).__name__}: {exc}"
    if traj is None:
        receipt = receipt_of(state="error", checker_ran=False, raised=traj_error[:TAIL_CHARS])
        return receipt, {"pass": False, "failure": "evaluation_error", "details": receipt.raised}
    if traj.status != "success":
        text = m.STATUS_GATE_TEXT.format(status=traj.status)
        receipt = receipt_of(state="declined", checker_ran=False, details=text)
        return receipt, {"pass": None, "details": text}
    scratch = inst_dir / m.EVAL_DIR / claim.attempt_id
    scratch.mkdir(parents=True, exist_ok=True)
    has_gt = current["groundtruth"].state == "present"
    request = checker_request(inst_dir, instance_id, claim.attempt_id, scratch, traj, has_gt)
    return _run_checker(runner, request, receipt_of)


def _run_checker(
    runner: CheckerRunner, request: CheckerRequest, receipt_of: _ReceiptOf
) -> tuple[m.EvalReceipt, dict[str, object]]:
    """The checker's run: its receipt and ``eval_res.json``."""
    try:
        run = runner(request)
    except Exception as exc:  # the runner's own failure (infra); the claim stays spent
        raised = f"{type(exc).__name__}: {exc}"[:TAIL_CHARS]
        receipt = receipt_of(state="error", checker_ran=False, raised=raised)
        return receipt, {"pass": False, "failure": "evaluation_error", "details": raised}
    passed = run.exit_code == 0
    res_log = file_fact(Path(run.res_log_path)) if run.res_log_path else None
    receipt = receipt_of(
        state="completed",
        checker_ran=True,
        exit_code=run.exit_code,
        **{"pass": passed},
        stdout_tail=run.stdout[-TAIL_CHARS:],
        stderr_tail=run.stderr[-TAIL_CHARS:],
        res_log=res_log.model_dump() if res_log else None,
    )
    eval_res: dict[str, object] = (
        {
            "pass": True,
            "details": "All evaluation checks passed, and task status is success",
        }
        if passed
        else {"pass": False, "failure": run.stdout}
    )
    return receipt, eval_res
