"""What ``harness programbench submission`` computes besides the copies: the ``_stats`` maps
from the effective rows (an unknown value left out and listed, never 0), the official
``programbench submit package`` / ``submit verify`` (Tier 0) as subprocesses with their
verdicts (exit code, duration, the tail of stdout and stderr), and the printed summary."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Literal

from benchmarks.programbench.leaderboard_records import (
    RECORD_NAME,
    STATS,
    CostStat,
    CountStat,
    StatGap,
    SubmissionRecord,
    ToolVerdict,
)
from benchmarks.programbench.official_eval import programbench_cli
from harness.api import TaskRow, atomic_write_text

TAIL_CHARS = 4000
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _tail(data: bytes) -> str:
    return _ANSI.sub("", data.decode("utf-8", errors="replace"))[-TAIL_CHARS:]


def run_submit(
    step: Literal["package", "verify"], folder: Path, *, timeout_s: float = 900.0
) -> ToolVerdict:
    """``programbench submit <step> <folder>`` (verify: Tier 0, the default)."""
    cmd = [*programbench_cli(), "submit", step, str(folder)]
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "TERM": "dumb"}
    started = time.monotonic()
    try:
        done = subprocess.run(cmd, capture_output=True, env=env, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        return ToolVerdict(
            step=step,
            cmd=cmd,
            returncode=None,
            ok=False,
            timed_out=True,
            duration_s=round(time.monotonic() - started, 3),
            stdout_tail=_tail(exc.stdout or b""),
            stderr_tail=_tail(exc.stderr or b""),
        )
    except OSError as exc:
        return ToolVerdict(
            step=step,
            cmd=cmd,
            returncode=None,
            ok=False,
            duration_s=round(time.monotonic() - started, 3),
            stderr_tail=f"cannot start the programbench CLI: {exc}",
        )
    return ToolVerdict(
        step=step,
        cmd=cmd,
        returncode=done.returncode,
        ok=done.returncode == 0,
        duration_s=round(time.monotonic() - started, 3),
        stdout_tail=_tail(done.stdout),
        stderr_tail=_tail(done.stderr),
    )


def cost_of(row: TaskRow) -> tuple[float | None, str]:
    if row.cost_known and row.cost_usd is not None:
        return float(row.cost_usd), ""
    source = row.details.agent.cost_source
    return None, f"cost unknown ({source or 'not recorded'})"


def calls_of(row: TaskRow) -> tuple[int | None, str]:
    if row.models:
        return sum(m.calls for m in row.models), ""
    steps = (row.details.agent.details or {}).get("steps")
    if row.details.agent.kind == "mini-swe-agent" and isinstance(steps, int):
        return steps, ""  # mini-swe-agent's steps are its model calls
    return None, "model calls not recorded"


def tokens_of(row: TaskRow) -> tuple[int | None, str]:
    if row.tokens is not None and row.tokens.completion is not None:
        return int(row.tokens.completion), ""
    if row.models and all(m.completion_tokens is not None for m in row.models):
        return sum(m.completion_tokens or 0 for m in row.models), ""
    return None, "output tokens not recorded"


def collect_stats(
    rows: dict[str, TaskRow],
) -> tuple[dict[str, dict[str, float | int]], list[StatGap]]:
    out: dict[str, dict[str, float | int]] = {s: {} for s in STATS}
    gaps: list[StatGap] = []
    for iid, row in sorted(rows.items()):
        for stat, fn in (("cost", cost_of), ("calls", calls_of), ("tokens", tokens_of)):
            value, reason = fn(row)
            if value is None:
                gaps.append(StatGap(instance_id=iid, stat=stat, reason=reason))  # type: ignore[arg-type]
            else:
                out[stat][iid] = value
    return out, gaps


def write_stats(dest: Path, stats: dict[str, dict[str, float | int]]) -> None:
    (dest / "_stats").mkdir(exist_ok=True)
    for stat, values in stats.items():
        model: CostStat | CountStat = (
            CostStat({k: float(v) for k, v in values.items()})
            if stat == "cost"
            else CountStat({k: int(v) for k, v in values.items()})
        )
        atomic_write_text(dest / "_stats" / f"{stat}.json", model.model_dump_json(indent=2) + "\n")


def _verdict_line(name: str, verdict: ToolVerdict | None) -> str:
    if verdict is None:
        return f"{name}: not run (submit package failed)"
    state = "ok" if verdict.ok else ("timed out" if verdict.timed_out else "FAILED")
    return f"{name}: {state} (exit {verdict.returncode}) {verdict.summary()}"


def print_record(record: SubmissionRecord) -> None:
    attempt = (
        f", attempt {record.attempt} of {record.attempts_per_task}"
        if record.attempts_per_task > 1
        else ""
    )
    print(
        f"submission: {len(record.instances)} instance(s) of run {record.run_id}{attempt} "
        f"-> {record.output}"
    )
    if record.forced:
        print(
            f"FORCED: not reportable ({'; '.join(record.not_reportable)}); recorded in "
            f"submission.yaml's description"
        )
    if record.subset_notice:
        print(f"note: {record.subset_notice} (the leaderboard counts a missing task 0)")
    for item in record.left_out:
        print(f"left out {item.instance_id}: {item.reason}")
    for packed in record.instances:
        for cut in packed.cut:
            print(f"cut {cut}")
    for stat in STATS:
        gaps = [g for g in record.unknown if g.stat == stat]
        if gaps:
            print(
                f"unknown {stat} (left out of _stats/{stat}.json, not 0): "
                + ", ".join(f"{g.instance_id} ({g.reason})" for g in gaps)
            )
    print(_verdict_line("programbench submit package", record.package))
    print(_verdict_line("programbench submit verify (Tier 0)", record.verify))
    print(f"record: {Path(record.output) / RECORD_NAME}")
    if record.ok:
        print(
            "next: fill in submission.yaml's TODO fields and README.md, then "
            "`programbench submit publish` and `programbench submit register`"
        )
