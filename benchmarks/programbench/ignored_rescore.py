"""``harness programbench rescore RUN --ignored-tests FILE``: the leaderboard's rescore, here.

The leaderboard recomputes every score from per-test results with the registry's current
``ignored_tests.json`` (``{instance_id: ["<branch>/<test name>", ...]}``, the keys of
``_stats/score.json``; ``scripts/compile_leaderboard.py`` of ``ProgramBench/submissions``).
This does the same from the run's kept eval.json files: per instance, the per-test map
``programbench info`` scores (active branches, the installed tests.json's ignored tests;
:func:`~benchmarks.programbench.official_eval.per_test_outcomes`), less the file's entries
for that instance, scored by the package's own ``score_from_tests`` (passed / remaining,
0 when none remain).

Old and new are printed side by side. Every instance whose score or test counts change
gets a new ledger row (the effective row with the new figures, ``details.rescore`` naming
the rule: the file, its sha256, the entries applied and those that matched no test),
appended with the runner's ledger writer (one fsynced append, under the run's lock); an
unchanged instance gets none, so a second rescore with the same file writes nothing. The
eval.json files are never changed. Not to be confused with
:mod:`benchmarks.programbench.rescore`, which makes a resume score a kept submission.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from filelock import Timeout
from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError

from benchmarks.programbench import NEAR_RESOLVED_AT
from benchmarks.programbench.kept_files import effective_rows, kept_files
from benchmarks.programbench.official_eval import DuplicateRecords, per_test_records
from harness.api import (
    RESOLVED_AT,
    LedgerWriter,
    ManifestError,
    TaskRow,
    read_manifest,
    refresh_figures,
    run_lock,
    run_roots,
)

MAX_IGNORE_BYTES = 64 << 20
DUPLICATE_RECORDS = DuplicateRecords.code


class RescoreRefused(Exception):
    """One line: what is wrong and the fix."""


class IgnoredTests(RootModel[dict[str, list[str]]]):
    """The registry's ``ignored_tests.json``: instance id -> ``"<branch>/<test>"`` names."""


RULE_IGNORED = "registry ignored_tests.json: score = passed / tests left after ignoring"
RULE_DEDUPE = ("duplicate records removed, the last record of each test wins (upstream "
               "ProgramBench issue 64): score = passed / tests")


class RescoreRule(BaseModel):
    """``details.rescore`` of a rescored row: the rule that produced its score."""

    model_config = ConfigDict(extra="forbid")

    rule: str = RULE_IGNORED
    ignored_tests_file: str | None = None
    ignored_tests_sha256: str | None = None
    duplicates_removed: int = 0  # records of a test past its last one (--dedupe-records)
    ignored: list[str] = Field(default_factory=list)  # this instance's entries that matched
    unmatched: list[str] = Field(default_factory=list)  # its entries that matched no test
    eval_json: str
    old_score: float | None
    new_score: float
    old_tests: tuple[int | None, int | None]
    new_tests: tuple[int, int]
    at_unix: float


class Rescored(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instance_id: str  # the row's id
    old_score: float | None
    new_score: float | None = None  # None: not rescored (see note)
    old_tests: tuple[int | None, int | None] = (None, None)
    new_tests: tuple[int, int] | None = None
    changed: bool = False
    note: str = ""
    row: TaskRow | None = Field(default=None, exclude=True)


def load_ignored(path: Path) -> tuple[dict[str, list[str]], str]:
    """The ignore map and the file's sha256; :class:`RescoreRefused` when unreadable."""
    try:
        data = path.read_bytes()
        if len(data) > MAX_IGNORE_BYTES:
            raise RescoreRefused(f"--ignored-tests {path} is larger than {MAX_IGNORE_BYTES} bytes")
        parsed = IgnoredTests.model_validate_json(data)
    except OSError as exc:
        raise RescoreRefused(f"--ignored-tests {path}: {exc}") from None
    except ValidationError:
        raise RescoreRefused(
            f"--ignored-tests {path} is not the registry's ignored_tests.json format "
            f'({{"<instance id>": ["<branch>/<test name>", ...]}}): pass that file'
        ) from None
    return parsed.root, hashlib.sha256(data).hexdigest()


def rescore_row(row: TaskRow, eval_json: Path, entries: list[str]) -> tuple[Rescored, RescoreRule]:
    """Old and new figures of one row (``RescoreRule`` without the file's name and hash)."""
    from programbench.submission import score_from_tests  # the package's own rule

    records = per_test_records(row.task_id, eval_json)
    tests = dict(records)  # the last record of each test wins
    ignore = set(entries)
    kept = {name: ok for name, ok in tests.items() if name not in ignore}
    new_score = float(score_from_tests(tests, ignore))
    new_tests = (sum(kept.values()), len(kept))
    old_tests = (row.tests_passed, row.tests_total)
    changed = new_score != row.score or new_tests != old_tests
    rule = RescoreRule(
        duplicates_removed=len(records) - len(tests),
        ignored=sorted(ignore & tests.keys()),
        unmatched=sorted(ignore - tests.keys()),
        eval_json=str(eval_json),
        old_score=row.score,
        new_score=new_score,
        old_tests=old_tests,
        new_tests=new_tests,
        at_unix=time.time(),
    )
    result = Rescored(
        instance_id=row.instance_id,
        old_score=row.score,
        new_score=new_score,
        old_tests=old_tests,
        new_tests=new_tests,
        changed=changed,
        note=f"{len(rule.unmatched)} ignored name(s) matched no test" if rule.unmatched else "",
    )
    return result, rule


def _new_row(row: TaskRow, rule: RescoreRule, run_id: str) -> TaskRow:
    partial = row.details.submission.partial_scored is True
    resolved = False if partial else rule.new_score >= RESOLVED_AT
    details = row.details.model_copy(deep=True)
    details.eval.rescore = rule.model_dump(mode="json")
    update: dict[str, object] = {
        "ts_unix": time.time(),
        "run_id": run_id,
        "score": rule.new_score,
        "resolved": resolved,
        "near_resolved": rule.new_score >= NEAR_RESOLVED_AT,
        "tests_passed": rule.new_tests[0],
        "tests_total": rule.new_tests[1],
        "details": details,
    }
    if row.reason_code in ("resolved", "unresolved"):
        update["reason_code"] = "resolved" if resolved else "unresolved"
    return row.model_copy(update=update)


def rescore_run(run: Path, ignored_file: Path | None, *, dedupe: bool = False,
                write: bool = True) -> list[Rescored]:
    """Rescore every scored effective row of ``run`` with the registry's ignore file, or
    (``dedupe``) with each test's duplicate records removed; append a row per changed one."""
    run = Path(run)
    if ignored_file is None and not dedupe:
        raise RescoreRefused("name a rule: --ignored-tests FILE or --dedupe-records")
    try:
        run_id = read_manifest(run).run_id
    except ManifestError as exc:
        raise RescoreRefused(str(exc)) from None
    ignore_map, sha = load_ignored(ignored_file) if ignored_file is not None else ({}, None)
    lock = run_lock(run)  # the controller's: no run writes this ledger meanwhile
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise RescoreRefused(
            f"{run} is still running (its run lock is held): rescore it when it has finished"
        ) from None
    try:
        roots = run_roots(run)
        results: list[Rescored] = []
        new_rows: list[TaskRow] = []
        for row in effective_rows(run):
            result, rule = _rescore_one(row, run, roots, ignore_map)
            results.append(result)
            if rule is None:
                continue
            if ignored_file is not None:
                rule.ignored_tests_file = str(Path(ignored_file).resolve())
                rule.ignored_tests_sha256 = sha
            else:
                rule.rule = RULE_DEDUPE
            if result.changed:
                new_rows.append(_new_row(row, rule, run_id))
        if write and new_rows:
            writer = LedgerWriter(run)
            if not writer.append_batch(new_rows) and writer.flush_pending():
                raise OSError(f"{run}: the rescored rows could not be written to the ledger")
            # the manifest's figures follow the ledger (issue 41), and so does the report
            why = (f"rescore with {Path(ignored_file).name} (sha256 {sha})"
                   if ignored_file is not None else "rescore: duplicate records removed")
            refresh_figures(run, why)
            rewrite_report(run)
    finally:
        lock.release()
    return results


def _rescore_one(row: TaskRow, run: Path, roots: dict[str, Path],
                 ignore_map: dict[str, list[str]]) -> tuple[Rescored, RescoreRule | None]:
    """One effective row's rescore (the rule None: not rescored, the note says why)."""
    def skipped(note: str) -> tuple[Rescored, None]:
        return Rescored(instance_id=row.instance_id, old_score=row.score, note=note), None

    if row.reason_code == DUPLICATE_RECORDS:
        return skipped("refused for duplicate records: a resume scores its kept submission")
    if row.official_eval_status != "completed" or row.score is None:
        return skipped("no verdict")
    kept = kept_files(row, run, roots)
    eval_json = kept.eval_json() if kept is not None else None
    if eval_json is None:
        return skipped("no eval.json kept: not rescored")
    try:
        return rescore_row(row, eval_json, ignore_map.get(row.task_id, []))
    except (OSError, ValueError) as exc:  # a torn or foreign eval.json
        return skipped(f"eval.json unreadable ({type(exc).__name__}): not rescored")


def rewrite_report(run: Path) -> None:
    """Write the run's report again (``harness report RUN --force``) when it has one, so it
    shows the rescored figures; a failure is said, the ledger and manifest stand."""
    if not (run / "report").is_dir():
        return
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "report", str(run), "--force"],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(f"harness programbench rescore: the report was not rewritten: "
              f"{proc.stderr.strip()[-300:]}; run harness report {run} --force", file=sys.stderr)


def _fmt(score: float | None, tests: tuple[int | None, int | None] | None) -> str:
    if score is None:
        return "-"
    counts = f" ({tests[0]}/{tests[1]})" if tests and tests[1] is not None else ""
    return f"{score:.4f}{counts}"


def print_results(results: list[Rescored], wrote: bool) -> None:
    width = max([len(r.instance_id) for r in results] + [8])
    print(f"{'instance':<{width}}  {'old':>16}  {'new':>16}")
    for r in results:
        mark = " *" if r.changed else ""
        note = f"  {r.note}" if r.note else ""
        print(
            f"{r.instance_id:<{width}}  {_fmt(r.old_score, r.old_tests):>16}  "
            f"{_fmt(r.new_score, r.new_tests):>16}{mark}{note}"
        )
    changed = [r for r in results if r.changed]
    rescored = [r for r in results if r.new_score is not None]
    if rescored:
        old = sum(r.old_score or 0.0 for r in rescored) / len(rescored)
        new = sum(r.new_score or 0.0 for r in rescored) / len(rescored)
        print(f"mean over the {len(rescored)} rescored instance(s): {old:.4f} -> {new:.4f}")
    verb = "appended" if wrote else "would append"
    print(f"{len(changed)} changed (*): {verb} {len(changed)} ledger row(s)")


def rescore_command(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="harness programbench rescore",
        description="Recompute every score from the run's kept eval.json files with the "
        "registry's ignored_tests.json, or with duplicate test records removed (the last "
        "record of a test wins); append a ledger row per changed instance.",
    )
    parser.add_argument("run", type=Path, help="run root")
    parser.add_argument(
        "--ignored-tests",
        type=Path,
        default=None,
        metavar="FILE",
        help='the registry\'s ignored_tests.json ({"<iid>": ["<branch>/<test>", ...]})',
    )
    parser.add_argument(
        "--dedupe-records",
        action="store_true",
        help="rescore with each test's duplicate records removed, the last one winning "
        "(a grader whose rerun plugin wrote a record per rerun; upstream issue 64)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print old and new, write no row")
    try:
        args = parser.parse_args(None if argv is None else list(argv))
    except SystemExit as exc:
        return 0 if exc.code == 0 else 2
    if args.ignored_tests is None and not args.dedupe_records:
        print("refused: name a rule: --ignored-tests FILE (the registry's ignore list) or "
              "--dedupe-records (duplicate test records removed)", file=sys.stderr)
        return 2
    try:
        results = rescore_run(args.run, args.ignored_tests, dedupe=args.dedupe_records,
                              write=not args.dry_run)
    except RescoreRefused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"harness programbench rescore: {exc}", file=sys.stderr)
        return 1
    if args.ignored_tests is not None:
        sha = hashlib.sha256(args.ignored_tests.read_bytes()).hexdigest()
        print(f"rescore of {args.run} with {args.ignored_tests} (sha256 {sha[:16]})")
    else:
        print(f"rescore of {args.run} with duplicate test records removed")
    print_results(results, wrote=not args.dry_run)
    return 0
