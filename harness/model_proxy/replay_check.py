"""``harness replay-check RUN --records DIR``: does a recorded trajectory really produce the
submission and the score its run reported? (issue 28 point 4)

Each instance of RUN is run again under strict replay (``--model-replay DIR``) in a new run
root, and its row compared with RUN's: the submission archive (its sha256, as the row
records it: ``details.submission.sha256_scored``, else ``.sha256``) and the official score.
Per instance the verdict is

* ``identical``: every call was served from the records, the hash and the score are equal;
* ``miss``: a call had no record (its position and its first difference from the call
  recorded there);
* ``diverged``: every call was served but the outcome differs, or the calls came in another
  order; the first differing call is named (the first position whose served record is not
  the one recorded there, or past the shorter of the two), or none when every call was as
  recorded (then the environment, not the model, changed the result);
* ``not_run``: the replay has no row for it.

**How the instances are run again.** A new ``pytest`` session, from the run's own directory
(``cwd`` of its manifest), with the run's own arguments (``argv`` of its manifest) minus
those naming its run root, a resume, a recording, a replay or an upstream, plus
``--run-root NEW --model-replay DIR``. This is the simplest robust way: the session is the
one that made the run, selectors, benchmark options and agent options included, and it
depends on nothing of the runner's internals.

**What a run root can make it run.** RUN may come from someone else, so its manifest is
read as data. The program is always this interpreter's ``-m pytest`` (a manifest whose argv
is not ``<python> -m pytest ...`` is refused); it runs in the run's directory, which must
exist and lie outside RUN and DIR (a run root cannot bring the conftest it is run with);
and the arguments that make pytest read a configuration or an argument file the manifest
names, or widen where it looks, are refused (exit 2, before any process starts):
``-c``/``--config-file``, ``--rootdir``, ``--confcutdir``, ``-o``/``--override-ini`` (it
can set ``pythonpath`` or ``addopts``) and ``@FILE``. What is left is the run itself, and it
is run: the conftest files of its directory and its test paths are imported (a module named
by ``-p``, ``-W``'s category or ``--pdbcls`` comes from the installed packages or that
directory, as they do), and its agent options start its agent (a ``host-command`` agent runs
its command on this machine). Re-running the agent is what the check is for, so check a
foreign run's command and directory (both are printed first) or check it in a sandbox. The resume machinery was the alternative and
does the wrong thing here: a resume carries settled rows forward and re-scores a kept
submission without running its agent. A run that was itself a resume (``--resume-from`` in
its argv) is re-run on the instances its manifest selected (``--instance ID`` each).

Exit status: 0 when every instance is identical, 1 otherwise, 2 on bad input. The verdicts
are written to ``replay_check.json`` (:class:`ReplayCheck`) in the new run root.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.core.argv import without_options
from harness.core.fsutil import atomic_write_json
from harness.core.models import Manifest, TaskRow
from harness.model_proxy.tape import (
    MISS_CODE,
    REPORT_NAME,
    ReplayReport,
    TapeConfig,
    TapeError,
    read_index,
)
from harness.run.ledger import instance_dir, ledger_path, read_ledger
from harness.run.manifest import ManifestError, read_manifest
from harness.run.model import RunModel, task_key
from harness.run.resume import ResumeError, walk_ancestry

CHECK_NAME = "replay_check.json"
# Options of the run not given again (each takes a value): its root and identity, a resume,
# the model tape, the upstream and its key, pytest's temporary folder.
DROPPED = (
    "--run-root",
    "--run-id",
    "--resume-from",
    "--model-record",
    "--model-replay",
    "--replay-order",
    "--model-upstream",
    "--model-key-env",
    "--basetemp",
)
# pytest options that read a file the manifest names or widen where pytest looks (above).
LOADING = ("-c", "--config-file", "--rootdir", "--confcutdir", "-o", "--override-ini")
SHORT_LOADING = "co"  # the short forms above, also inside a cluster (-xoNAME=VALUE)
SHORT_VALUED = "kmrnpW"  # short options whose value follows (the rest of a cluster is it)
Verdict = Literal["identical", "diverged", "miss", "not_run"]


class ReplayArgsError(ValueError):
    """A manifest's argv that replay-check will not run (one line)."""


class InstanceCheck(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str
    verdict: Verdict
    recorded_sha256: str | None = None
    replayed_sha256: str | None = None
    recorded_score: float | None = None
    replayed_score: float | None = None
    recorded_calls: int | None = None
    replayed_calls: int | None = None
    first_differing_call: int | None = None
    detail: str = ""


class ReplayCheck(BaseModel):
    """``replay_check.json`` in the new run root."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: str = Field(default="harness.replay_check.v1", alias="schema")
    run: str
    records: str
    replay_run: str
    command: list[str]
    exit_code: int
    units: list[str] = Field(default_factory=list)  # the units replayed (this run ran them)
    instances: list[InstanceCheck] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict)


def submission_sha256(row: TaskRow) -> str | None:
    sub = row.details.submission
    return sub.sha256_scored or sub.sha256 or None


def loading_argument(args: Sequence[str]) -> str | None:
    """The first argument that makes pytest read a file the manifest names or widen where
    it looks (:data:`LOADING`, ``@FILE``), None when there is none."""
    for i, arg in enumerate(args):
        if arg.startswith("@"):
            return arg
        if arg.startswith("--"):
            if arg.split("=", 1)[0] in LOADING:
                return arg
            continue
        if not arg.startswith("-") or len(arg) < 2:
            continue
        for j, letter in enumerate(arg[1:], start=2):
            if letter in SHORT_VALUED:
                break
            if letter in SHORT_LOADING:
                value = arg[j:] or (args[i + 1] if i + 1 < len(args) else "")
                return arg if arg[j:] else f"{arg} {value}"
    return None


def replay_args(argv: Sequence[str], selection: Sequence[str]) -> list[str]:
    """The run's pytest arguments to give again (see the module's docstring);
    :class:`ReplayArgsError` for an argv that is not a pytest session's, or that loads
    code or configuration of its own."""
    args = list(argv)
    if len(args) < 3 or args[1:3] != ["-m", "pytest"]:
        raise ReplayArgsError(f"its argv does not start with '<python> -m pytest': {args[:3]}")
    args = args[3:]
    found = loading_argument(args)
    if found is not None:
        raise ReplayArgsError(
            f"its argv has {found!r}, which makes pytest read a file the run names or look "
            f"elsewhere; replay-check does not run it (check the run by hand)"
        )
    kept, dropped = without_options(args, DROPPED)
    if "--resume-from" in dropped:
        for task in dict.fromkeys(task_key(k).split("/", 1)[-1] for k in selection):
            kept += ["--instance", task]
    return kept


# What selects instances: replaced by the units this run executed (see rebuild_args).
SELECTORS = ("-k", "-m", "--instance", "--task-file", "--attempts")
FLAG_SELECTORS = ("--all-instances",)


def _node_id(args: Sequence[str], i: int) -> bool:
    """Whether ``args[i]`` is a node id given as a selector (``path::test``), not the value
    of an option such as ``-W ignore::Warning``."""
    before = args[i - 1] if i else ""
    return "::" in args[i] and not args[i].startswith("-") and not (
        before.startswith("-") and "=" not in before and before in VALUED)


VALUED = frozenset({"-W", "--pythonwarnings", "-p", "--ignore", "--ignore-glob", "--basetemp",
                    "--junitxml", "--junit-xml", "-o", "--override-ini"})


def executed_units(manifest: Manifest, latest: dict[str, TaskRow]) -> list[str]:
    """The units of this run's selection it ran itself (not carried from an ancestor, not
    left unstarted), in selection order: what a replay can check."""
    return [k for k in manifest.selection.instance_ids if k in latest
            and latest[k].carried_from is None
            and latest[k].outcome.value not in ("not_attempted", "blocked")]


def rebuild_args(chain: Sequence[Manifest], units: Sequence[str]) -> list[str]:
    """The session that runs ``units`` of ``chain[0]`` again with every setting the run had,
    inherited ones included, from the run model: the settings of the run that chose them
    (the chain's first run: a resume's configuration equals its ancestors'), this run's K
    (``--attempts``), and a selection of exactly ``units`` (``--instance`` per task, and
    ``-k task@k`` per attempt when K > 1). :class:`ReplayArgsError` as for :func:`replay_args`."""
    run, first = chain[0], chain[-1]
    args = replay_args(first.argv, [])
    args, _ = without_options(args, SELECTORS)
    args = [a for i, a in enumerate(args) if a not in FLAG_SELECTORS and not _node_id(args, i)]
    k = RunModel.of_manifest(run).attempts  # given or inherited: the run model's K
    tasks = list(dict.fromkeys(task_key(u).split("/", 1)[1] for u in units))
    for task in tasks:
        args += ["--instance", task]
    if k > 1:
        args += ["--attempts", str(k), "-k", " or ".join(u.split("/", 1)[1] for u in units)]
    return args


def check_instance(
    key: str, recorded: TaskRow, replayed: TaskRow | None, replay_root: Path, records: Path
) -> InstanceCheck:
    """The verdict of one instance (see the module's docstring)."""
    out = InstanceCheck(
        key=key,
        verdict="not_run",
        recorded_sha256=submission_sha256(recorded),
        recorded_score=recorded.score,
    )
    index = read_index(records, recorded.benchmark, recorded.instance_id)
    out.recorded_calls = None if index is None else len(index.calls)
    if replayed is None:
        out.detail = "the replay has no row for this instance"
        return out
    out.replayed_sha256 = submission_sha256(replayed)
    out.replayed_score = replayed.score
    path = instance_dir(replay_root, replayed.benchmark, replayed.instance_id) / REPORT_NAME
    report = ReplayReport.model_validate_json(path.read_bytes()) if path.is_file() else None
    if report is not None:
        out.replayed_calls = report.calls
    if report is not None and report.misses:
        miss = report.misses[0]
        out.verdict, out.first_differing_call = "miss", miss.position
        out.detail = f"{miss.reason}" + (
            f"; first difference: {miss.first_difference}" if miss.first_difference else ""
        )
        return out
    if replayed.reason_code == MISS_CODE:
        out.verdict, out.detail = "miss", "the row failed with replay_miss"
        return out
    first = None
    if report is not None and index is not None:
        recorded_at = {c.position: c.record for c in index.calls}
        for served in report.served:
            if recorded_at.get(served.position) != served.record:
                first = served.position
                break
        if first is None and report.calls != len(index.calls):
            first = min(report.calls, len(index.calls)) + 1
    same = out.recorded_sha256 == out.replayed_sha256 and recorded.score == replayed.score
    if same and first is None:
        out.verdict = "identical"
        out.detail = "every call served from the records; same submission and score"
        return out
    out.verdict, out.first_differing_call = "diverged", first
    parts = []
    if out.recorded_sha256 != out.replayed_sha256:
        parts.append("the submission differs")
    if recorded.score != replayed.score:
        parts.append(f"the score differs ({recorded.score} recorded, {replayed.score} now)")
    if first is None:
        parts.append("every call was as recorded: the environment, not the model, differs")
    else:
        parts.append(f"call {first} is not the one recorded at that position")
    out.detail = "; ".join(parts)
    return out


def _fail(message: str) -> int:
    print(f"harness replay-check: {message}", file=sys.stderr)
    return 2


def replay_check_command(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="harness replay-check",
        description="re-run each instance of RUN under strict replay of DIR and compare "
        "its submission hash and official score with RUN's row",
    )
    parser.add_argument("run", type=Path, help="the run root to check")
    parser.add_argument(
        "--records",
        required=True,
        type=Path,
        help="the records directory (--model-record DIR of that run)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help="the new run root (default: RUN-replay-check-<time>)",
    )
    args = parser.parse_args(list(argv))
    try:
        manifest = read_manifest(args.run)
    except ManifestError as exc:
        return _fail(f"{args.run}: {exc}")
    try:
        TapeConfig("replay", args.records.absolute()).prepare()
    except TapeError as exc:
        return _fail(str(exc).replace("--model-replay", "--records", 1))
    original = read_ledger(ledger_path(args.run)).latest
    if not original:
        return _fail(f"{args.run}: no rows to check (the run has an empty ledger)")
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    out = (args.output or args.run.parent / f"{args.run.name}-replay-check-{stamp}").absolute()
    if out.exists():
        return _fail(f"--output {out} exists: run roots are never reused; name a new one")
    try:
        replay_args(manifest.argv, [])  # a run's own argv that loads code is refused first
    except ReplayArgsError as exc:
        return _fail(f"{args.run}: {exc}")
    cwd = Path(manifest.cwd).resolve()
    if not cwd.is_dir():
        return _fail(f"{args.run}: the run's directory {manifest.cwd} is not here")
    for given, name in ((args.run, "the run root"), (args.records, "--records")):
        if cwd.is_relative_to(given.resolve()):
            return _fail(
                f"{args.run}: the run's directory {cwd} is inside {name}: a run root "
                f"cannot bring the code it is checked with; check it from its checkout"
            )
    units = executed_units(manifest, original)
    rebuilt = _rebuilt(args.run, units)
    if isinstance(rebuilt, int):
        return rebuilt
    args_again = rebuilt
    command = [
        sys.executable,
        "-m",
        "pytest",
        *args_again,
        "--run-root",
        str(out),
        "--model-replay",
        str(args.records.absolute()),
    ]
    print(f"replay-check: {' '.join(command)}  (in {cwd})", flush=True)
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS")
    }
    done = subprocess.run(command, cwd=cwd, env=env, check=False)
    if not ledger_path(out).is_file():
        return _fail(f"the replay session wrote no run root at {out} (exit {done.returncode})")
    check = ReplayCheck(
        run=str(args.run.absolute()),
        records=str(args.records.absolute()),
        replay_run=str(out),
        command=command,
        exit_code=done.returncode,
        units=units,
    )
    return report_check(check, original, out, args.records.absolute())


def _rebuilt(run: Path, units: list[str]) -> list[str] | int:
    """The session's arguments for ``units`` (:func:`rebuild_args`), said first; an exit
    status when there is nothing to replay or the chain cannot be read."""
    if not units:
        return _fail(f"{run}: no unit of it ran in it (every one was carried from an "
                     "ancestor or never started): check the run that ran them")
    try:
        args = rebuild_args(walk_ancestry(run, set_aside=False).manifests, units)
    except (ReplayArgsError, ResumeError) as exc:
        return _fail(f"{run}: {exc}")
    print(f"replay-check: replaying the {len(units)} unit(s) this run ran: "
          f"{', '.join(units[:20])}{' ...' if len(units) > 20 else ''}", flush=True)
    return args


def report_check(check: ReplayCheck, original: dict[str, TaskRow], out: Path,
                 records: Path) -> int:
    """Each instance's verdict against the replay's row, printed and written; the exit
    status (0 when every one is identical)."""
    replayed = read_ledger(ledger_path(out)).latest
    for key, row in sorted(original.items()):
        if row.carried_from is not None:
            continue  # settled in an ancestor: checked with that run
        check.instances.append(check_instance(key, row, replayed.get(key), out, records))
    for item in check.instances:
        check.counts[item.verdict] = check.counts.get(item.verdict, 0) + 1
        sha = (item.replayed_sha256 or "none")[:12]
        print(
            f"{item.key}: {item.verdict} (sha256 {sha}, score {item.replayed_score}"
            f"{'' if item.first_differing_call is None else f', call {item.first_differing_call}'}"
            f") {item.detail}"
        )
    atomic_write_json(out / CHECK_NAME, check)
    summary = ", ".join(f"{k} {v}" for k, v in sorted(check.counts.items()))
    print(f"replay-check of {len(check.instances)} instances: {summary}; wrote {out / CHECK_NAME}")
    return 0 if check.instances and all(i.verdict == "identical" for i in check.instances) else 1


def _main() -> Any:  # pragma: no cover - python -m harness.model_proxy.replay_check
    return replay_check_command(sys.argv[1:])


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(_main())
