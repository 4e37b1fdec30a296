"""``harness programbench submission RUN --output DIR``: a run in the leaderboard's layout.

``DIR`` gets what ``programbench submit package`` takes, one folder per task:

* ``<iid>/submission.tar.gz`` and ``<iid>/<iid>.eval.json``: byte copies of the files the
  official eval scored (a carried instance's from the ancestor run that scored it); the
  archive's sha256 must be the one the row recorded, or the instance is left out;
* ``<iid>/<iid>.traj.json``: mini-swe-agent's trajectory, in its own format, where the agent
  kept one;
* ``_stats/cost.json``, ``calls.json`` and ``tokens.json`` (``{iid: value}``; tokens are
  output tokens, as the registry's) from the effective rows, and ``_stats/languages.json``
  (``{iid: language}``, the registry's rule: :mod:`benchmarks.programbench.languages`). An unknown value is left out
  and listed (the command's output, ``harness_submission.json``, ``submission.yaml``'s
  ``description``), never written as 0.

Then the official ``programbench submit package DIR`` (it writes ``_stats/score.json`` and
``submission.yaml``, and splits each eval.json) and ``programbench submit verify DIR`` (Tier
0) run as subprocesses; both verdicts go to ``DIR/harness_submission.json`` and the output.

Refusals (exit 2, one line naming the fix): a run that is not reportable (unless
``--force``, which ``submission.yaml``'s ``description`` records), a run still running, a
non-empty ``DIR`` that is not an earlier output of this command, a run with repeated
attempts without ``--attempt N`` (the attempt whose rows go to the leaderboard, the same N
for every task: never the best of K), and a run with nothing to package. Fixture tasks
(``testorg__*``) are never packaged: ``programbench submit package`` drops them.

An earlier output is rewritten in place: its instance folders, ``_stats`` files and record
go; ``submission.yaml``'s author fields and ``README.md`` stay (``submit package`` keeps
them), and so does anything else (a ``.git``).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

from benchmarks.programbench import official_eval
from benchmarks.programbench.kept_files import (
    KeptFiles,
    effective_rows,
    kept_files,
)
from benchmarks.programbench.languages import submission_languages
from benchmarks.programbench.leaderboard_records import (
    RECORD_NAME,
    STATS,
    CopiedFile,
    LeftOut,
    PackedInstance,
    SeedManifest,
    SeedSystem,
    SubmissionRecord,
    SubmissionRefused,
)
from benchmarks.programbench.leaderboard_tools import (
    collect_stats,
    print_record,
    run_submit,
    write_stats,
)
from benchmarks.programbench.tasks import FIXTURE_PREFIX, programbench_version
from harness.api import (
    INSTANCE_ID_RE,
    Manifest,
    TaskRow,
    atomic_write_json,
    atomic_write_text,
    open_regular,
    read_manifest,
    reportability,
    run_roots,
)

# --- what goes in ------------------------------------------------------------------------


def choose_attempt(rows: list[TaskRow], attempt: int | None) -> tuple[list[TaskRow], int]:
    """The rows of one attempt per task and K (attempts per task). A run with repeated
    attempts needs ``attempt``; a run without them takes none or 1."""
    sampled = [r for r in rows if r.sample is not None]
    if not sampled:
        if attempt not in (None, 1):
            raise SubmissionRefused(
                f"the run has one attempt per task: --attempt {attempt} does not exist; "
                f"drop --attempt"
            )
        return rows, 1
    k = max(r.sample or 0 for r in sampled)
    if attempt is None:
        raise SubmissionRefused(
            f"the run has {k} attempts per task: choose the one that goes to the "
            f"leaderboard with --attempt N (1..{k}; the same attempt for every task)"
        )
    if not 1 <= attempt <= k:
        raise SubmissionRefused(f"--attempt {attempt} is out of range: use 1..{k}")
    return [r for r in rows if r.sample == attempt], k


def _plan(run: Path, rows: list[TaskRow]) -> tuple[list[KeptFiles], list[LeftOut]]:
    roots = run_roots(run)
    chosen: list[KeptFiles] = []
    left: list[LeftOut] = []
    for row in rows:
        iid = row.task_id
        if iid.startswith(FIXTURE_PREFIX):
            left.append(
                LeftOut(
                    instance_id=iid,
                    reason="fixture task: programbench submit package never packages testorg__ ids",
                )
            )
            continue
        if row.official_eval_status != "completed" or row.score is None:
            left.append(
                LeftOut(
                    instance_id=iid,
                    reason=f"no official verdict ({row.outcome.value}"
                    f", {row.reason_code or row.status}): the leaderboard counts 0",
                )
            )
            continue
        kept = kept_files(row, run, roots)
        if kept is None:
            left.append(
                LeftOut(
                    instance_id=iid,
                    reason=f"carried from run {row.carried_from}, "
                    "which is not among the manifest's ancestors",
                )
            )
            continue
        missing = [
            n
            for n, p in (("eval.json", kept.eval_json()), ("submission.tar.gz", kept.submission()))
            if p is None
        ]
        if missing:
            left.append(
                LeftOut(
                    instance_id=iid, reason=f"{' and '.join(missing)} not kept in {kept.folder}"
                )
            )
            continue
        chosen.append(kept)
    return chosen, left


# --- writing -----------------------------------------------------------------------------


# What one instance's files may weigh in a package (the agent wrote the trajectory, and the
# program under test's output can fill the eval.json, whose bound the scorer reads by): past
# it, a trajectory is not copied and an eval.json leaves its instance out, each said in the
# record and the output.
MAX_TRAJECTORY_BYTES = 64 << 20


def _copy(src: Path, dest: Path) -> CopiedFile:
    """Byte copy of a regular file (never through a link), hashed as it is copied."""
    handle = open_regular(src)
    if handle is None:
        raise OSError(f"{src} is not a regular file")
    digest, size = hashlib.sha256(), 0
    with handle, open(dest, "xb") as out:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
            out.write(chunk)
    return CopiedFile(name=dest.name, sha256=digest.hexdigest(), size_bytes=size, source=str(src))


def _copy_instance(kept: KeptFiles, dest_root: Path) -> PackedInstance | LeftOut:
    row, iid = kept.row, kept.row.task_id
    folder = dest_root / iid
    folder.mkdir()
    sub, ev = kept.submission(), kept.eval_json()
    assert sub is not None and ev is not None
    packed = PackedInstance(
        instance_id=iid,
        row_instance_id=row.instance_id,
        attempt=row.sample,
        source_run=str(kept.root.resolve()),
        carried_from=row.carried_from,
        score=row.score,
    )
    archive = _copy(sub, folder / "submission.tar.gz")
    want = kept.expected_submission_sha256()
    if want is not None and archive.sha256 != want:
        shutil.rmtree(folder)
        return LeftOut(
            instance_id=iid,
            reason=f"{sub} has sha256 {archive.sha256[:12]}, not the "
            f"scored {want[:12]}: left out (the kept archive is not the scored one)",
        )
    packed.submission_sha256_verified = want is not None
    if _size(ev) > official_eval.MAX_EVAL_JSON_BYTES:  # a verdict: copied whole or not at all
        shutil.rmtree(folder)
        return LeftOut(instance_id=iid, reason=f"{ev} has {_size(ev)} bytes, over the "
                       f"{official_eval.MAX_EVAL_JSON_BYTES} a package takes: left out")
    packed.files = [archive, _copy(ev, folder / f"{iid}.eval.json")]
    traj = kept.trajectory()
    if traj is not None and _size(traj) > MAX_TRAJECTORY_BYTES:
        packed.cut.append(f"{iid}.traj.json: {_size(traj)} bytes, over the "
                          f"{MAX_TRAJECTORY_BYTES} a package takes (not copied)")
    elif traj is not None:
        packed.files.append(_copy(traj, folder / f"{iid}.traj.json"))
    return packed


def _size(path: Path) -> int:
    return path.lstat().st_size


def _check_output(dest: Path, run: Path) -> SubmissionRecord | None:
    """The earlier record when ``dest`` is an earlier output of this command, None when it
    is new or empty; refuses any other folder, and one overlapping the run root."""
    run_abs, dest_abs = run.resolve(), dest.resolve()
    if dest_abs == run_abs or dest_abs.is_relative_to(run_abs) or run_abs.is_relative_to(dest_abs):
        raise SubmissionRefused(
            f"--output {dest} overlaps the run root {run}: run roots are "
            f"append-only; pass a folder outside it"
        )
    if not dest.exists() or (dest.is_dir() and not any(dest.iterdir())):
        return None
    if not dest.is_dir():
        raise SubmissionRefused(f"--output {dest} is not a folder: pass a new or empty folder")
    try:
        return SubmissionRecord.model_validate_json((dest / RECORD_NAME).read_text())
    except (OSError, ValueError):
        raise SubmissionRefused(
            f"--output {dest} is not empty and is not an earlier output of "
            f"this command (no valid {RECORD_NAME}): pass a new or empty "
            f"folder"
        ) from None


def _clear_earlier(dest: Path, earlier: SubmissionRecord | None) -> None:
    """Remove what an earlier output wrote (its instance folders and ``_stats`` files); its
    record stays until the new one replaces it, the author's files stay."""
    dest.mkdir(parents=True, exist_ok=True)
    if earlier is None:
        return
    for item in earlier.instances:
        if INSTANCE_ID_RE.match(item.instance_id) and item.instance_id not in (".", ".."):
            shutil.rmtree(dest / item.instance_id, ignore_errors=True)
    for stat in (*STATS, "score", "languages"):
        (dest / "_stats" / f"{stat}.json").unlink(missing_ok=True)


def _seed_yaml(dest: Path, manifest: Manifest) -> None:
    agent = manifest.extra.agent or {}
    seed = SeedManifest(
        system=SeedSystem(
            agent=str(agent.get("kind") or "TODO"), model=str(agent.get("solve_model") or "TODO")
        )
    )
    atomic_write_text(dest / "submission.yaml", yaml.safe_dump(seed.model_dump(), sort_keys=False))


def describe(record: SubmissionRecord) -> str:
    """``submission.yaml``'s ``description``: the run, a forced refusal, unknown stats."""
    parts = [
        f"Written by `harness programbench submission` from run {record.run_id} "
        f"({len(record.instances)} instance(s)"
        + (
            f", attempt {record.attempt} of {record.attempts_per_task}"
            if record.attempts_per_task > 1
            else ""
        )
        + ")."
    ]
    if record.forced:
        parts.append(
            "FORCED (--force): the run is not reportable: " + "; ".join(record.not_reportable) + "."
        )
    for stat in STATS:
        ids = [g.instance_id for g in record.unknown if g.stat == stat]
        if ids:
            parts.append(
                f"Unknown {stat} (left out of _stats/{stat}.json, not 0): " + ", ".join(ids) + "."
            )
    return " ".join(parts)


def _add_description(dest: Path, text: str) -> None:
    path = dest / "submission.yaml"
    body = path.read_text()
    if not body.endswith("\n"):
        body += "\n"
    atomic_write_text(path, body + yaml.safe_dump({"description": text}, width=100))


def write_languages(dest: Path, packed: list[PackedInstance]) -> int:
    """``_stats/languages.json`` over the packed instances; how many it names."""
    languages = submission_languages(dest, [p.instance_id for p in packed])
    atomic_write_text(dest / "_stats" / "languages.json",
                      languages.model_dump_json(indent=2) + "\n")
    return len(languages.root)


def write_submission(run: Path, dest: Path, *, force: bool = False, attempt: int | None = None,
                     timeout_s: float = 900.0) -> SubmissionRecord:
    """Write ``dest`` from ``run``, package and verify it; :class:`SubmissionRefused`."""
    from harness.api import lock_is_held

    run, dest = Path(run), Path(dest)
    try:
        manifest = read_manifest(run)
    except Exception as exc:
        raise SubmissionRefused(str(exc)) from None
    if lock_is_held(run):
        raise SubmissionRefused(
            f"{run} is still running (its run lock is held): wait for it to finish, then package it"
        )
    earlier = _check_output(dest, run)
    reasons = reportability(manifest)
    if reasons and not force:
        raise SubmissionRefused(
            f"{run} is not reportable ({'; '.join(reasons)}): run it "
            f"reportable, or pass --force (recorded in submission.yaml)"
        )
    rows, k = choose_attempt(effective_rows(run), attempt)
    chosen, left = _plan(run, rows)
    if not chosen:
        listed = "; ".join(f"{x.instance_id}: {x.reason}" for x in left[:5]) or "no rows"
        raise SubmissionRefused(
            f"{run} has nothing programbench submit package can take "
            f"({listed}): score non-fixture tasks with the official eval"
        )
    _clear_earlier(dest, earlier)
    record = SubmissionRecord(
        created_at_unix=time.time(),
        source_run=str(run.resolve()),
        run_id=manifest.run_id,
        output=str(dest.resolve()),
        reportable=not reasons,
        not_reportable=reasons,
        forced=bool(reasons),
        attempt=attempt if k > 1 else None,
        attempts_per_task=k,
        subset_notice=manifest.subset_notice,
        left_out=left,
        instances=[
            PackedInstance(
                instance_id=c.row.task_id,
                row_instance_id=c.row.instance_id,
                source_run=str(c.root.resolve()),
            )
            for c in chosen
        ],
        programbench_version=programbench_version(),
    )
    atomic_write_json(dest / RECORD_NAME, record)  # names every folder this may create
    packed: list[PackedInstance] = []
    for kept in chosen:
        result = _copy_instance(kept, dest)
        (packed if isinstance(result, PackedInstance) else record.left_out).append(result)  # type: ignore[arg-type]
    record.instances = packed
    row_of = {kept.row.task_id: kept.row for kept in chosen}
    stats, record.unknown = collect_stats({p.instance_id: row_of[p.instance_id] for p in packed})
    write_stats(dest, stats)
    record.stats_written = {**{s: len(v) for s, v in stats.items()},
                            "languages": write_languages(dest, packed)}
    if not (dest / "submission.yaml").exists():
        _seed_yaml(dest, manifest)
    record.description = describe(record)
    atomic_write_json(dest / RECORD_NAME, record)
    record.package = run_submit("package", dest, timeout_s=timeout_s)
    if record.package.ok:
        _add_description(dest, record.description)
        record.verify = run_submit("verify", dest, timeout_s=timeout_s)
    record.status = "written"
    atomic_write_json(dest / RECORD_NAME, record)
    return record


def submission_command(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="harness programbench submission",
        description="Write a run in the layout `programbench submit package` takes, then run "
        "the official package and Tier-0 verify on it.",
    )
    parser.add_argument("run", type=Path, help="run root")
    parser.add_argument(
        "--output",
        type=Path,
        required=True,
        help="new or empty folder, or an earlier output of this command "
        "(its name becomes the submission id)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="package a run that is not reportable (recorded in submission.yaml's description)",
    )
    parser.add_argument(
        "--attempt",
        type=int,
        metavar="N",
        help="with repeated attempts (--attempts K): the attempt that goes "
        "to the leaderboard, the same for every task",
    )
    try:
        args = parser.parse_args(None if argv is None else list(argv))
    except SystemExit as exc:
        return 0 if exc.code == 0 else 2
    try:
        record = write_submission(args.run, args.output, force=args.force, attempt=args.attempt)
    except SubmissionRefused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"harness programbench submission: {exc}", file=sys.stderr)
        return 1
    print_record(record)
    return 0 if record.ok else 1
