"""One ProgramBench instance: the steps the runner's trial (:mod:`harness.runner.trial`) runs.

instruction -> (dry run: task body, stop) -> (a resume: a kept submission is scored, no
agent) -> cleanroom sandbox (no network, agent user,
capabilities dropped, no core dumps, reference moved out of reach behind a setuid launcher:
:mod:`harness.sandbox.protected`) -> preflight -> agent ->
``submission.tar.gz`` streamed from the sandbox's workspace (also when the agent did not
finish; bounded: a workspace over the copy-out caps is the agent's failure) ->
official ``programbench eval`` (per task, or batch at session end, or off) -> the row.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.programbench import scorer_guard
from benchmarks.programbench.agent_probe import probe_as_agent
from benchmarks.programbench.collect import export_submission, freeze_and_probe
from benchmarks.programbench.host_workspace import (
    bind_source,
    host_folder,
    install_reference,
    seed,
)
from benchmarks.programbench.host_workspace import remove as remove_host_workspace
from benchmarks.programbench.instruction import render_instruction
from benchmarks.programbench.official_eval import OfficialEvalResult, evaluate_instance
from benchmarks.programbench.rescore import adopt, find_kept_submission
from benchmarks.programbench.task_body import REFERENCE_NAME
from benchmarks.programbench.task_body import agent_terms as task_terms
from benchmarks.programbench.tasks import PBInstance
from benchmarks.programbench.verdict import verdict
from benchmarks.programbench.workspace import prepare_cleanroom
from harness.api import (
    PROTECTED_SANDBOX_CAP_DROP,
    PROTECTED_SANDBOX_ULIMITS,
    AgentDetails,
    AgentOutcome,
    AgentRequest,
    AgentTerms,
    CopyRefused,
    EngineDetails,
    EvalDetails,
    InfraError,
    InstanceContext,
    Kept,
    NewFile,
    OracleCallable,
    OracleUnavailable,
    Outcome,
    ProtectedInstallFailed,
    ProtectedMissing,
    Sandbox,
    SubmissionDetails,
    Trial,
    atomic_write_json,
    hash_untrusted_file,
    run_labels,
)
from harness.api import Verdict as TrialVerdict

WORKSPACE = "/workspace"
EVAL_OFF_REASON = "submission_prepared"  # --pb-eval off: kept for a later eval (rescore.py)


def resolve_instance_image(trial: Trial, inst: PBInstance) -> tuple[str, str | None]:
    """(image ID, PROGRAMBENCH_BLOB_DIR) of an instance, pulled or built; recorded in the row.

    A real task's image is pulled per ``--pull`` (from ``--image-mirror`` when given, pinned by
    ``--image-digest-file``, held under ``--image-disk-ceiling-gb``: :meth:`Trial.pull_image`);
    the offline fixture is built here unless a mirror serves it.
    """
    ctx, config = trial.ctx, trial.config
    blob_dir: str | None = None
    if inst.is_fixture:
        from benchmarks.programbench.fixture import ensure_fixture

        mirror = config.getoption("image_mirror")
        fixture = ensure_fixture(image=mirror is None, client=trial.client)
        blob_dir = fixture.blob_dir
        if config.getoption("pb_fixture_layout") == "cleanroom":
            from benchmarks.programbench.fixture_image import ensure_cleanroom_layout_image

            reference = Path(fixture.blob_dir).parent / "reference" / "calculator"
            image_id = ensure_cleanroom_layout_image(reference.read_bytes())
            EngineDetails(image={"ref": "cleanroom-layout fixture", "id": image_id,
                                 "built_locally": True}).put(ctx.result.details)
            return image_id, blob_dir
        if mirror is None:
            EngineDetails(image={"ref": fixture.image, "id": fixture.image_id,
                                 "built_locally": True}).put(ctx.result.details)
            return fixture.image_id, blob_dir
    return trial.pull_image(inst.image_ref()), blob_dir


def preflight(ctx: InstanceContext, sandbox: Sandbox, *,
              host_workspace: bool = False) -> dict[str, Any]:
    """Network mode none, reference protected and probed; every failure is infra."""
    info = sandbox.api.inspect_container(sandbox.id)
    mode = info["HostConfig"]["NetworkMode"]
    if mode != "none":
        raise InfraError(f"cleanroom sandbox has network mode {mode!r}, not 'none'",
                         "cleanroom_preflight_failed")
    try:
        # A real image may have no agent user and a root-owned /workspace; the reference's
        # hash is recorded: it is never copied out.
        layout, prot = prepare_cleanroom(sandbox, host_workspace=host_workspace)
    except ProtectedMissing as exc:
        raise InfraError(f"no reference program in the cleanroom image: {exc}",
                         "reference_missing") from None
    except ProtectedInstallFailed as exc:
        raise InfraError(f"cannot protect the reference program: {exc}",
                         "reference_protect_failed") from None
    probe: dict[str, Any] = {"network_mode": mode, "layout_adapted": layout,
                             "reference": {"sha256": prot.sha256, "size": prot.size},
                             "privileges_stripped": len(prot.stripped)}
    view = probe_as_agent(sandbox, f"./{REFERENCE_NAME}", WORKSPACE)
    if view.launcher_error is not None:
        raise InfraError("the agent user cannot run the reference program: "
                         f"{view.launcher_error}", "reference_probe_failed")
    probe["reference_probe"] = view.probe or "launched"  # "launched": it ran, no probe gave 0
    probe["reference_mode"] = view.mode
    caps = view.capabilities
    if int(caps.get("CapEff", "1"), 16) or int(caps.get("CapPrm", "1"), 16):
        raise InfraError(f"the agent user holds capabilities in the cleanroom sandbox: {caps}",
                         "agent_user_privileged")
    probe["agent_capabilities"] = caps
    return probe


def oracle_for(inst: PBInstance, sandbox: Sandbox) -> OracleCallable:
    """The oracle writes the bundled correct submission (the fixture's only)."""

    def apply(request: AgentRequest) -> AgentOutcome:
        if not inst.is_fixture:
            raise OracleUnavailable(f"{inst.instance_id}: ProgramBench ships no reference "
                                    f"solution for this task (only the fixture has one)")
        from benchmarks.programbench.fixture import ensure_fixture

        # The image was asserted when the instance started: only the oracle's files here.
        files = ensure_fixture(image=False).oracle_contents()
        sandbox.write_files([
            NewFile(f"{WORKSPACE}/{rel}", data, 0o755 if rel.endswith(".sh") else 0o644,
                    uid=1000, gid=1000)
            for rel, data in files.items()])
        return AgentOutcome(agent="oracle", completed=True, reason_code="oracle_applied",
                            cost_usd=0.0, cost_known=True)

    return apply


def start_sandbox(trial: Trial, settings: Any, image_id: str,
                  labels: Mapping[str, str]) -> Sandbox:
    """A fresh cleanroom sandbox, prepared and probed; with a host workspace (``--pb-workspace
    host``, or ``auto`` with the gateway agent, whose sandbox carries reattach ``labels``) its
    ``/workspace`` is a folder under the run root (:mod:`benchmarks.programbench.host_workspace`)."""
    ctx, factory = trial.ctx, trial.factory
    host = settings.workspace == "host" or (settings.workspace == "auto" and bool(labels))
    binds: tuple[tuple[str, str], ...] = ()
    reference = None
    if host:
        folder = host_folder(ctx.instance_dir)
        reference = seed(factory.client, image_id, folder,
                         run_labels(ctx.run_id, ctx.instance_id, ctx.worker_id, ctx.run_root))
        binds = ((str(folder), WORKSPACE),)
    # No no_new_privileges: it would disable the reference's setuid launcher (see
    # harness.sandbox.protected for what replaces it).
    sandbox: Sandbox = factory(image_id, user="agent", workdir=WORKSPACE, network="none",
                               cap_drop=PROTECTED_SANDBOX_CAP_DROP,
                               ulimits=PROTECTED_SANDBOX_ULIMITS, cpus=settings.cpus,
                               memory=settings.memory, pids_limit=4096,
                               labels=dict(labels), binds=binds)
    if host:
        install_reference(sandbox, reference)
    trial.details["preflight"] = preflight(ctx, sandbox, host_workspace=host)
    return sandbox


def collect_submission(ctx: InstanceContext, sandbox: Sandbox) -> Path | TrialVerdict:
    """``submission.tar.gz`` streamed from the sandbox (no host copy of the workspace, no
    host program run on it); the agent's failure, with the reason code, when its workspace
    was refused (there is then no submission)."""
    dest = ctx.instance_dir / "submission.tar.gz"
    facts = freeze_and_probe(sandbox, WORKSPACE)
    if facts.probe_error:
        SubmissionDetails(probe_error=facts.probe_error).put(ctx.result.details)
    try:
        info = export_submission(sandbox, dest, facts=facts, protected_paths=[REFERENCE_NAME],
                                 workspace=WORKSPACE)
    except CopyRefused as exc:
        dest.unlink(missing_ok=True)
        limits = sandbox.copy_limits
        SubmissionDetails(refused={
            "reason": exc.reason_code, "error": str(exc)[:1000],
            "max_copy_out_mb": limits.max_bytes >> 20, "max_copy_out_files": limits.max_files,
        }).put(ctx.result.details)
        return TrialVerdict(outcome="agent_failed", reason_code=exc.reason_code,
                            error=str(exc), eval_status="not_run")
    atomic_write_json(ctx.instance_dir / "submission_info.json", info)
    ctx.output("submission", dest)
    ctx.result.prediction_written = True
    collected = SubmissionDetails(files=info.file_count, sha256=info.sha256,
                                  bytes=info.content_bytes)
    if info.protected_dropped:
        collected.protected_dropped = list(info.protected_dropped)
    collected.put(ctx.result.details)
    return dest


def eval_verdict(ctx: InstanceContext, result: OfficialEvalResult, completed: bool,
                 reason: str | None) -> TrialVerdict:
    """The official eval's result as the row's verdict (its details in the row's eval and
    submission sections, and ProgramBench's own)."""
    atomic_write_json(ctx.instance_dir / "official_eval.json", result)
    if result.eval_json:
        ctx.output("eval_json", Path(result.eval_json))
    v = verdict(result, completed=completed, reason=reason)
    v.put(ctx.result.details)
    if v.outcome is Outcome.INFRA_FAILED:
        return TrialVerdict(outcome="infra", reason_code=v.reason_code,
                            error=v.error or v.reason_code, eval_status=v.official_eval_status)
    failed = v.outcome is Outcome.AGENT_FAILED  # refused by name (no score), partial work
    return TrialVerdict(
        outcome="agent_failed" if failed else "scored", score=v.score, resolved=v.resolved,
        near_resolved=v.near_resolved, tests_passed=v.tests_passed, tests_total=v.tests_total,
        reason_code=v.reason_code, error=v.error, eval_status=v.official_eval_status)


def set_aside_interrupted_eval(ctx: InstanceContext) -> None:
    """An eval cut at its deadline may leave the CLI's eval.json of what it had done: not
    a verdict, so renamed (``.interrupted``) where ``programbench info``, the parity check
    and a resume never read it as one."""
    names: list[str] = []
    for path in ctx.instance_dir.glob("*.eval.json"):
        path.rename(path.with_name(path.name + ".interrupted"))
        names.append(path.name)
    if names:
        before = EvalDetails.read(ctx.result.details).interrupted or []
        EvalDetails(interrupted=[*before, *names]).put(ctx.result.details)


def score_submission(ctx: InstanceContext, settings: Any, submission: Path, completed: bool,
                     reason: str | None, blob_dir: str | None) -> TrialVerdict:
    """The eval step of an instance, per ``--pb-eval``: off, batch (at session end), per task."""
    inst: PBInstance = ctx.data
    if settings.eval_mode == "off":
        # Not a score (never a 0): skipped, so a resume with an eval scores the kept
        # submission (see :mod:`benchmarks.programbench.rescore`) instead of carrying it.
        return TrialVerdict(outcome="skipped", reason_code=EVAL_OFF_REASON,
                            error="--pb-eval off: submission kept, not scored; resume with "
                                  "--pb-eval per-task or batch to score it", eval_status="not_run")
    if settings.eval_mode == "batch" and ctx.sample is None:  # an attempt: scored here
        EvalDetails(pending={"completed": completed, "reason": reason,
                             "blob_dir": blob_dir}).put(ctx.result.details)
        return TrialVerdict(outcome="pending", reason_code="eval_pending",
                            eval_status="pending")
    result = evaluate_instance(eval_source(ctx, inst, submission), inst.instance_id,
                               docker_cpus=settings.docker_cpus, blob_dir=blob_dir,
                               timeout_s=3 * 3600)
    return eval_verdict(ctx, result, completed, reason)


def eval_source(ctx: InstanceContext, inst: PBInstance, submission: Path) -> Path:
    """The folder ``programbench eval`` reads ``<task id>/submission.tar.gz`` from: the run's
    ``programbench`` folder, whose instance folders are named by task; for one of K attempts
    (``--attempts``, folder ``<task>@<k>``) a folder of the attempt's own holding a copy of
    its submission under the task's name (the eval's files are named by the task)."""
    if ctx.sample is None:
        return ctx.run_root / "programbench"
    src = ctx.instance_dir / "official_eval"
    folder = src / inst.instance_id
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(submission, folder / "submission.tar.gz")
    return src


# The trial's steps (harness.runner.trial): ProgramBenchAdapter's hooks call these ---------
def instruction(trial: Trial) -> str:
    return render_instruction(trial.data)


def agent_terms(trial: Trial) -> AgentTerms:
    """ProgramBench's terms (:mod:`.task_body`); a dry run names the host folder a run would
    mount on the workspace (``--pb-workspace host``, or ``auto`` for an agent that reattaches:
    its sandbox is kept, see start_sandbox)."""
    terms = task_terms(trial.data)
    if not trial.ctx.dry_run:
        return terms
    settings = _settings(trial)
    host = settings.workspace == "host" or (settings.workspace == "auto"
                                            and trial.agent.reattaches)
    if not host:
        return terms
    return replace(terms, host_workspace=str(host_folder(trial.ctx.instance_dir)))


def dry_run(trial: Trial, instruction: str) -> None:
    """With ``--pull always`` the image is pulled and recorded (a prefetch), nothing run (the
    trial writes what the agent kind would submit)."""
    if trial.option("pull") == "always":
        resolve_instance_image(trial, trial.data)


def prepare(trial: Trial) -> str:
    """The task's image on the instance's engine (its blob folder kept for the eval)."""
    image_id, blob_dir = resolve_instance_image(trial, trial.data)
    trial.state["blob_dir"] = blob_dir
    return image_id


def kept_artifact(trial: Trial) -> Kept | None:
    kept = find_kept_submission(trial.ctx)
    if kept is None:
        return None
    return Kept(adopt(trial.ctx, kept), kept.completed, kept.reason)


def provision(trial: Trial, image: str, labels: Mapping[str, str]) -> Sandbox:
    return start_sandbox(trial, _settings(trial), image, labels)


def collect(trial: Trial, sandbox: Sandbox) -> Path | TrialVerdict:
    """The submission, scorer-guarded; the host workspace folder goes once collected."""
    ctx = trial.ctx
    host_ws = bind_source(sandbox)
    try:
        submission = collect_submission(ctx, sandbox)
    finally:  # (host_workspace.remove)
        if host_ws is not None and not trial.option("keep_sandboxes"):
            remove_host_workspace(host_ws)
    if isinstance(submission, TrialVerdict):
        return submission  # the agent's workspace was refused: nothing to score
    guarded = scorer_guard.row_details(submission)  # before any eval mode
    if guarded.scorer_files_removed or guarded.scorer_files_rewritten:
        # the archive the eval scores, as the guard wrote it
        report = scorer_guard.read_report(submission.parent)
        guarded.sha256_scored = (
            report.sha256_out if report is not None else hash_untrusted_file(submission)[0])
    guarded.put(ctx.result.details)
    return submission


def score(trial: Trial, sandbox: Sandbox | None, submission: Path) -> TrialVerdict:
    ctx = trial.ctx
    if sandbox is not None:  # the agent ran now (a kept submission brings its own)
        AgentDetails(outcome={"completed": trial.agent_completed,
                              "reason": trial.agent_reason}).put(ctx.result.details)
    return score_submission(ctx, _settings(trial), submission, trial.agent_completed,
                            trial.agent_reason, trial.state.get("blob_dir"))


def _settings(trial: Trial) -> Any:
    """The adapter's settings (``ProgramBenchAdapter.settings``; the adapter calls these
    steps, so this module does not import it)."""
    adapter: Any = trial.ctx.adapter
    return adapter.settings(trial.config)
