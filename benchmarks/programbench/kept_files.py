"""Where a run's instance files are kept: the run root that scored each effective row.

The effective row of an instance is the last row of its key in the run's ledger. A row the
run scored itself has its files in ``<run>/programbench/<instance id>/``; a row a resume
carried forward (``carried_from``) has them in the ancestor run that scored it, found among
the manifest's ancestors by run id. A row's ``output_paths`` are relative to that root; when
one is missing (or points outside the root) the conventional name in the instance folder
is used: ``<task id>.eval.json`` (``programbench eval`` names it after the task),
``submission.tar.gz`` and mini-swe-agent's ``mini_swe_agent.traj.json``.

Reading only: nothing here writes, and no program runs on these files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchmarks.programbench import BENCHMARK
from benchmarks.programbench.scorer_guard import read_report
from benchmarks.programbench.submission import SubmissionInfo
from harness.api import TaskRow, is_carried, is_regular_file, ledger_path, read_ledger, row_root

SUBMISSION = "submission.tar.gz"
TRAJECTORY = "mini_swe_agent.traj.json"  # harness.agents.mini_swe.TRAJ_NAME
SUBMISSION_INFO = "submission_info.json"


def effective_rows(run: Path) -> list[TaskRow]:
    """The last row of every ProgramBench key in the run's ledger, by instance id."""
    latest = read_ledger(ledger_path(run)).latest
    return sorted(
        (r for r in latest.values() if r.benchmark == BENCHMARK), key=lambda r: r.instance_id
    )


def scored_sha256(row: TaskRow) -> str | None:
    """The sha256 of the archive the official eval scored, as the row recorded it."""
    sub = row.details.submission
    return sub.sha256_scored or sub.sha256 or None


@dataclass(frozen=True)
class KeptFiles:
    """The files of one effective row, in the run root that scored it."""

    row: TaskRow
    root: Path
    carried: bool

    @property
    def folder(self) -> Path:
        return self.root / BENCHMARK / self.row.instance_id

    def _named(self, key: str, default: str) -> Path | None:
        text = self.row.output_paths.get(key)
        candidates = []
        if text:
            path = Path(text)
            candidates.append(path if path.is_absolute() else self.root / path)
        candidates.append(self.folder / default)
        root = self.root.resolve()
        for path in candidates:
            try:
                inside = path.parent.resolve().is_relative_to(root)
            except OSError:
                continue
            if inside and is_regular_file(path):
                return path
        return None

    def eval_json(self) -> Path | None:
        return self._named("eval_json", f"{self.row.task_id}.eval.json")

    def submission(self) -> Path | None:
        return self._named("submission", SUBMISSION)

    def trajectory(self) -> Path | None:
        return self._named("trajectory", TRAJECTORY)

    def expected_submission_sha256(self) -> str | None:
        """What the scored archive's sha256 must be: the row's record, else the scorer
        guard's output, else the packed archive's (``submission_info.json``)."""
        want = scored_sha256(self.row)
        if want:
            return want
        report = read_report(self.folder)
        if report is not None and report.sha256_out:
            return report.sha256_out
        try:
            info = SubmissionInfo.model_validate_json((self.folder / SUBMISSION_INFO).read_text())
        except (OSError, ValueError):
            return None
        return info.sha256 or None


def kept_files(row: TaskRow, run: Path, roots: dict[str, Path]) -> KeptFiles | None:
    """The row's files; None when a carried row's scoring run is not among the ancestors."""
    root = row_root(row, run, roots)
    return KeptFiles(row, root, is_carried(row)) if root is not None else None
