"""Run the official ``programbench eval`` CLI and read its verdict back.

The CLI always runs as a subprocess (the package reads ``PROGRAMBENCH_BLOB_DIR`` at import
time). Its stdout/stderr are kept in files; each ``<iid>.eval.json`` is parsed with the
package's own model and scored exactly like ``programbench info`` does (active branches,
ignored tests dropped, ``EvaluationResult.score``).

Before the CLI sees a submission, :mod:`~benchmarks.programbench.scorer_guard` cuts out what
would steer its pytest (idempotent; the runner already did it). The CLI's docker goes through
:mod:`~benchmarks.programbench.docker_policy`: every eval container has network ``none``, and
overrides written by ``compile.sh`` are deleted before the build is committed. Both are
recorded in ``official_eval.json`` (``scorer_guard``, ``docker_policy``).

An instance that produced no eval.json (a missing image, a failed DNS block, a missing blob,
a crash, a timeout) is ``official_eval_status: error`` with the CLI's message; it never
becomes a score of 0 by itself. ``error_cause`` says who caused it: ``agent`` when the
submission did (a results.xml its processes emptied or forged, a workspace the tests cannot
be unpacked into, a dead container of the image its build left), else ``infra``. An
eval.json with a top-level ``error_code`` (e.g. ``compile_failed``) is a completed eval: the
submission scored what it scored.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from benchmarks.programbench import CLEANROOM_TAG, NEAR_RESOLVED_AT
from benchmarks.programbench.cli_env import (  # noqa: F401  (re-exported)
    SPEC_DOCKER_CPUS,
    CliSetupError,
    default_docker_cpus,
    programbench_cli,
)
from benchmarks.programbench.docker_policy import (
    ACCOUNT_KEY_NAME,
    install,
    sweep,
)
from benchmarks.programbench.docker_policy_record import DockerPolicy, summarize
from benchmarks.programbench.eval_checks import (  # noqa: F401  (re-exported)
    ACCOUNT_PREFIX,
    DENIED,
    BuildNeedsRoot,
    DuplicateRecords,
    EvalJsonRefused,
    EvalJsonTooLarge,
    VerdictMismatch,
    check_build_user,
    check_pytest_account,
    check_unique_records,
    parse_plugins,
)
from benchmarks.programbench.eval_failures import (  # noqa: F401  (re-exported)
    INFRA_MARKERS,
    SUBMISSION_EXCEPTIONS,
    UNPACK_MARKER,
    CliRun,
    cli_failure,
    failure_cause,
)
from benchmarks.programbench.scorer_guard import (
    GuardError,
    ScorerGuardReport,
    guard_submission,
    read_report,
)
from benchmarks.programbench.tasks import programbench_version, tasks_dir
from harness.api import RESOLVED_AT, atomic_write_text, instance_environment

RESULT_NAME = "official_eval.json"
# Bounds on what crosses from the eval to this host (issue 40): the official CLI's heap
# (RLIMIT_DATA, through util-linux prlimit), the eval.json read back, and the CLI's own
# output read back (its tail, where an exception is). Step outputs are cut in the container
# already (docker_policy.STEP_OUTPUT_CAP), so an honest eval stays far below them.
CLI_DATA_LIMIT = 4 << 30
MAX_EVAL_JSON_BYTES = 64 << 20
MAX_CLI_OUTPUT_READ = 4 << 20
STOP_GRACE_S = 30.0
STDOUT_NAME = "official_eval.stdout.txt"
STDERR_NAME = "official_eval.stderr.txt"
PB_DOCKER_ENV = "PROGRAMBENCH_DOCKER_EXECUTABLE"


class OfficialEvalResult(BaseModel):
    """``official_eval.json`` in the instance folder: the official verdict of one instance."""

    model_config = ConfigDict(extra="forbid")

    instance_id: str
    official_eval_status: Literal["completed", "error"]
    score: float | None = None
    resolved: bool | None = None
    near_resolved: bool | None = None
    tests_passed: int | None = None
    tests_total: int | None = None
    error_code: str | None = None  # eval.json's top-level code, or the CLI's exception name
    error_message: str | None = None
    test_branch_errors: dict[str, list[str]] = Field(default_factory=dict)
    n_warnings: int = 0
    executable_hash: str | None = None
    eval_json: str | None = None
    stdout_path: str | None = None
    stderr_path: str | None = None
    cmd: list[str] = Field(default_factory=list)
    returncode: int | None = None
    duration_s: float | None = None
    programbench_version: str = Field(default_factory=programbench_version)
    # who caused an error without a verdict: the submission ("agent") or our dependencies
    error_cause: Literal["agent", "infra"] | None = None
    docker_policy: DockerPolicy | None = None  # the policy in force for the eval's docker
    scorer_guard: ScorerGuardReport | None = None  # what was cut from the submission
    # seconds per phase (see :func:`eval_timings`); the row's ``details.eval.timings``
    timings: dict[str, float] = Field(default_factory=dict)
    # the test plugins the eval's pytest resolved, {distribution: version} (issue 45: the
    # grader drifts with them); the row's ``details.eval.test_plugins``
    test_plugins: dict[str, str] = Field(default_factory=dict)


def _stop(proc: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    """SIGINT first, so the CLI's ``finally`` blocks remove its containers and images."""
    for sig, wait in ((signal.SIGINT, grace_s), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def limited(cmd: list[str]) -> list[str]:
    """``cmd`` under :data:`CLI_DATA_LIMIT` of heap (as it is where prlimit is missing)."""
    prlimit = shutil.which("prlimit")
    return [prlimit, f"--data={CLI_DATA_LIMIT}", "--", *cmd] if prlimit else cmd


def read_tail(path: Path, limit: int = MAX_CLI_OUTPUT_READ) -> str:
    """The last ``limit`` bytes of a file the CLI wrote, as text."""
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        fh.seek(max(0, size - limit))
        return fh.read().decode(errors="replace")


def read_eval_json(path: Path) -> str:
    size = path.stat().st_size
    if size > MAX_EVAL_JSON_BYTES:
        raise EvalJsonTooLarge(f"{path.name} has {size} bytes, over the {MAX_EVAL_JSON_BYTES} "
                               "this runner reads (the submission's output fills it)")
    return path.read_text()


def real_docker() -> str:
    """The docker CLI the policy passes through to (the caller's choice, else ``docker``)."""
    chosen = os.environ.get(PB_DOCKER_ENV) or "docker"
    return shutil.which(chosen) or chosen


def _run_cli(
    args: list[str],
    *,
    blob_dir: Path | str | None,
    stdout_path: Path,
    stderr_path: Path,
    timeout_s: float | None,
) -> CliRun:
    """Run the CLI with its docker behind our policy (no network for any eval container)."""
    with tempfile.TemporaryDirectory(prefix="pb-docker-policy-") as tmp:
        started = time.monotonic()
        docker = real_docker()
        try:
            wrapper, log = install(Path(tmp), docker=docker)
        except OSError as exc:
            return CliRun(cmd=[*programbench_cli(), *args], returncode=None, stdout="",
                          stderr=f"docker policy: cannot install: {exc}", duration_s=0.0)
        installed = time.monotonic()
        env = instance_environment()  # the engine of the instance (a placed run's slot)
        try:
            run = _run_cli_with(args, {**env, PB_DOCKER_ENV: str(wrapper)}, blob_dir=blob_dir,
                                stdout_path=stdout_path, stderr_path=stderr_path,
                                timeout_s=timeout_s)
        finally:
            swept = time.monotonic()
            sweep(docker, Path(tmp).name, env=env)
        key = (Path(tmp) / ACCOUNT_KEY_NAME).read_text().strip()
        return run.model_copy(update={"real_docker": docker, "policy_log": log.read_text(),
                                      "account_key": key,
                                      "policy_label": Path(tmp).name,
                                      "policy_install_s": round(installed - started, 3),
                                      "sweep_s": round(time.monotonic() - swept, 3)})


def _run_cli_with(
    args: list[str],
    environment: dict[str, str],
    *,
    blob_dir: Path | str | None,
    stdout_path: Path,
    stderr_path: Path,
    timeout_s: float | None,
) -> CliRun:
    cmd = limited([*programbench_cli(), *args])
    env = dict(environment)  # the whole environment of the CLI, given explicitly
    if blob_dir is not None:
        env["PROGRAMBENCH_BLOB_DIR"] = str(blob_dir)
    env.setdefault("NO_COLOR", "1")
    env.setdefault("COLUMNS", "200")
    stdout_path.parent.mkdir(parents=True, exist_ok=True)
    started_at = time.time()
    started = time.monotonic()
    timed_out = False
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, start_new_session=True)
        try:
            returncode: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _stop(proc)
            returncode = None
        except BaseException:
            _stop(proc)
            raise
    return CliRun(
        cmd=cmd,
        returncode=returncode,
        stdout=read_tail(stdout_path),
        stderr=read_tail(stderr_path),
        duration_s=round(time.monotonic() - started, 3),
        timed_out=timed_out,
        started_at=started_at,
    )


def _tests_meta(instance_id: str) -> dict[str, object]:
    path = tasks_dir() / instance_id / "tests.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    return {"branches": data.get("branches") or {}}


def score_eval_json(instance_id: str, eval_json: Path, *, account_key: str | None = None,
                    build_user: bool = False) -> OfficialEvalResult:
    """Score one eval.json like ``programbench info`` (current tests.json filtering).
    ``account_key``: the eval ran under the results guard with this key, so each branch's
    results are held against pytest's own account (:func:`check_pytest_account`).
    ``build_user``: the build ran as the program user (:func:`check_build_user`)."""
    from programbench.eval.eval import EvaluationResult
    from programbench.utils.load_data import get_active_branches, get_ignored_tests

    result = EvaluationResult.model_validate_json(read_eval_json(eval_json))
    check_unique_records(result)
    plugins = check_pytest_account(result, account_key) if account_key is not None else {}
    if build_user:
        check_build_user(result)
    inst = _tests_meta(instance_id)
    if inst["branches"]:
        result = result.for_branches(get_active_branches(inst)).without_ignored(
            get_ignored_tests(inst)
        )
    score = float(result.score)
    return OfficialEvalResult(
        instance_id=instance_id,
        official_eval_status="completed",
        score=score,
        resolved=score >= RESOLVED_AT,
        near_resolved=score >= NEAR_RESOLVED_AT,
        tests_passed=int(result.n_resolved),
        tests_total=len(result),
        error_code=result.error_code,
        error_message=result.error_details,
        test_branch_errors={
            b: [e.error_code for e in errs] for b, errs in result.test_branch_errors.items()
        },
        n_warnings=len(result.warnings),
        executable_hash=result.executable_hash,
        eval_json=str(eval_json),
        test_plugins=plugins,
    )


def per_test_outcomes(instance_id: str, eval_json: Path) -> dict[str, bool]:
    """``{"<branch>/<junit name>": passed}`` over the scored tests (the registry's format);
    a test recorded more than once counts once, by its last record."""
    return dict(per_test_records(instance_id, eval_json))


def per_test_records(instance_id: str, eval_json: Path) -> list[tuple[str, bool]]:
    """``("<branch>/<junit name>", passed)`` per record of the scored tests, in order (a
    test is there twice when the grader's plugins wrote a record per rerun, issue 45)."""
    from programbench.eval.eval import EvaluationResult
    from programbench.utils.load_data import get_active_branches, get_ignored_tests

    result = EvaluationResult.model_validate_json(read_eval_json(eval_json))
    inst = _tests_meta(instance_id)
    if inst["branches"]:
        result = result.for_branches(get_active_branches(inst)).without_ignored(
            get_ignored_tests(inst)
        )
    return [(t.full_name, t.status == "passed") for t in result.test_results]


def _eval_args(
    src: Path,
    *,
    filter_spec: str,
    docker_cpus: int,
    image_tag: str,
    output: Path | None,
    force: bool,
    workers: int,
) -> list[str]:
    args = ["eval", str(src), "--filter", filter_spec, "--docker-cpus", str(docker_cpus)]
    args += ["--image-tag", image_tag, "-w", str(workers)]
    if force:
        args.append("-f")
    if output is not None:
        args += ["-o", str(output)]
    return args


def eval_json_path(src: Path, instance_id: str, output: Path | None = None) -> Path:
    target = Path(output) / Path(src).name if output is not None else Path(src)
    return target / instance_id / f"{instance_id}.eval.json"


def eval_timings(run: CliRun, policy: DockerPolicy, **measured: float) -> dict[str, float]:
    """Seconds per phase of one official eval: ``guard_s`` (the submission guard),
    ``policy_install_s``, ``cli_s`` (the whole CLI call) split into ``cli_start_s`` (to its
    first container), ``cli_build_s`` (copy-in, ``compile.sh`` and the policy's build check),
    ``cli_tests_s`` (commit, test containers, tests, clean-up); ``policy_s`` (what the
    policy's Python spent inside the CLI, its docker calls included), ``sweep_s``,
    ``score_s`` (reading eval.json) and whatever else the caller measured."""
    out = {"policy_install_s": run.policy_install_s, "cli_s": run.duration_s,
           "policy_s": policy.python_s, "sweep_s": run.sweep_s}
    first, checked = policy.first_container_at, policy.build_checked_at
    if run.started_at and first is not None:
        out["cli_start_s"] = first - run.started_at
        if checked is not None:
            out["cli_build_s"] = checked - first
            out["cli_tests_s"] = run.started_at + run.duration_s - checked
    out.update(measured)
    return {k: round(max(v, 0.0), 3) for k, v in out.items()}


def _finish(
    instance_id: str,
    run: CliRun,
    eval_json: Path,
    stdout: Path,
    stderr: Path,
    write_to: Path | None,
    guard_s: float = 0.0,
) -> OfficialEvalResult:
    policy = summarize(run.policy_log, run.real_docker, instance_id, run.policy_label)
    scoring = time.monotonic()
    if run.timed_out:
        # An interrupted CLI may still write an eval.json (the stopped step recorded as a
        # failure): that is no verdict, so it is set aside, never scored.
        _discard_stale(eval_json)
        code, message = cli_failure(run, instance_id)
        result = OfficialEvalResult(
            instance_id=instance_id,
            official_eval_status="error",
            error_code=code,
            error_message=message,
            error_cause="infra",
        )
    elif eval_json.exists():
        try:
            result = score_eval_json(instance_id, eval_json, account_key=(
                run.account_key if policy.results_guarded > 0 else None),
                build_user=policy.build_user is not None)
        except Exception as exc:  # a torn or foreign eval.json is an error, not a 0
            refused = exc if isinstance(exc, EvalJsonRefused) else EvalJsonRefused()
            result = OfficialEvalResult(
                instance_id=instance_id,
                official_eval_status="error",
                error_code=refused.code,
                error_cause=refused.cause,
                error_message=f"{type(exc).__name__}: {exc}"[:4000],
                eval_json=str(eval_json),
            )
    else:
        code, message = cli_failure(run, instance_id)
        result = OfficialEvalResult(
            instance_id=instance_id,
            official_eval_status="error",
            error_code=code,
            error_message=message,
            error_cause=failure_cause(code, message, policy.built_containers),
        )
    timings = eval_timings(run, policy, guard_s=guard_s,
                           score_s=time.monotonic() - scoring)
    result = result.model_copy(
        update={
            "timings": timings,
            "docker_policy": policy,
            "scorer_guard": read_report(write_to) if write_to is not None else None,
            "stdout_path": str(stdout),
            "stderr_path": str(stderr),
            "cmd": run.cmd,
            "returncode": run.returncode,
            "duration_s": run.duration_s,
        }
    )
    if write_to is not None:
        atomic_write_text(write_to / RESULT_NAME, result.model_dump_json(indent=2) + "\n")
    return result


def _discard_stale(path: Path) -> None:
    """Move an old eval.json aside so a failed run cannot be read as a fresh verdict."""
    if path.exists():
        os.replace(path, path.with_name(path.name + f".stale-{int(time.time())}"))


def _guard(folder: Path, instance_id: str) -> OfficialEvalResult | None:
    """Cut scorer overrides out of ``<folder>/submission.tar.gz`` (idempotent); an archive
    that cannot be read is an error of the submission's, written as its verdict."""
    try:
        guard_submission(folder / "submission.tar.gz")
    except (GuardError, OSError) as exc:
        result = OfficialEvalResult(
            instance_id=instance_id,
            official_eval_status="error",
            error_code="submission_unreadable",
            error_message=str(exc)[:4000],
            error_cause="agent",
        )
        atomic_write_text(folder / RESULT_NAME, result.model_dump_json(indent=2) + "\n")
        return result
    return None


def evaluate_instance(
    src: Path | str,
    instance_id: str,
    *,
    docker_cpus: int | None = None,
    image_tag: str = CLEANROOM_TAG,
    blob_dir: Path | str | None = None,
    output: Path | str | None = None,
    timeout_s: float | None = None,
    force: bool = True,
) -> OfficialEvalResult:
    """Evaluate ``<src>/<instance_id>/submission.tar.gz`` with one CLI call.

    Logs and ``official_eval.json`` go to ``<src>/<instance_id>/``; the eval.json goes there
    too, or under ``<output>/<src name>/<instance_id>/`` with ``output``.
    """
    src = Path(src)
    out = Path(output) if output is not None else None
    folder = src / instance_id
    eval_json = eval_json_path(src, instance_id, out)
    _discard_stale(eval_json)
    guarding = time.monotonic()
    refused = _guard(folder, instance_id)
    if refused is not None:
        return refused
    guard_s = time.monotonic() - guarding
    stdout, stderr = folder / STDOUT_NAME, folder / STDERR_NAME
    args = _eval_args(
        src,
        filter_spec=f"^{re.escape(instance_id)}$",
        docker_cpus=docker_cpus or default_docker_cpus(),
        image_tag=image_tag,
        output=out,
        force=force,
        workers=1,
    )
    run = _run_cli(
        args, blob_dir=blob_dir, stdout_path=stdout, stderr_path=stderr, timeout_s=timeout_s
    )
    return _finish(instance_id, run, eval_json, stdout, stderr, folder, guard_s)


def evaluate_batch(
    src: Path | str,
    instance_ids: list[str] | None = None,
    *,
    docker_cpus: int | None = None,
    image_tag: str = CLEANROOM_TAG,
    blob_dir: Path | str | None = None,
    output: Path | str | None = None,
    workers: int = 1,
    timeout_s: float | None = None,
    force: bool = True,
) -> dict[str, OfficialEvalResult]:
    """One CLI call over ``src`` (every ``<iid>/submission.tar.gz``, or only ``instance_ids``).

    Logs go to ``<src>/official_eval.stdout.txt`` / ``.stderr.txt``; each instance gets its
    ``official_eval.json``.
    """
    src = Path(src)
    out = Path(output) if output is not None else None
    if instance_ids is None:
        instance_ids = sorted(
            d.name for d in src.iterdir() if d.is_dir() and (d / "submission.tar.gz").exists()
        )
    if not instance_ids:
        return {}
    refused: dict[str, OfficialEvalResult] = {}
    guarding = time.monotonic()
    for iid in instance_ids:
        _discard_stale(eval_json_path(src, iid, out))
        bad = _guard(src / iid, iid)
        if bad is not None:
            refused[iid] = bad
    instance_ids = [i for i in instance_ids if i not in refused]
    if not instance_ids:
        return refused
    guard_s = time.monotonic() - guarding
    pattern = "^(" + "|".join(re.escape(i) for i in sorted(instance_ids)) + ")$"
    stdout, stderr = src / STDOUT_NAME, src / STDERR_NAME
    args = _eval_args(
        src,
        filter_spec=pattern,
        docker_cpus=docker_cpus or default_docker_cpus(),
        image_tag=image_tag,
        output=out,
        force=force,
        workers=workers,
    )
    run = _run_cli(
        args, blob_dir=blob_dir, stdout_path=stdout, stderr_path=stderr, timeout_s=timeout_s
    )
    return refused | {
        iid: _finish(iid, run, eval_json_path(src, iid, out), stdout, stderr, src / iid,
                     guard_s)
        for iid in instance_ids
    }


def run_info(src: Path | str, *, timeout_s: float | None = 600) -> str:
    """``programbench info <src>``: its stdout (the official table over eval.json files found)."""
    proc = subprocess.run(
        limited([*programbench_cli(), "info", str(src)]),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"programbench info {src} failed ({proc.returncode}): {proc.stderr.strip()[-1000:]}"
        )
    return proc.stdout
