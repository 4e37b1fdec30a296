"""The example CI workflow (``.github/workflows/benchmark.yml``) run locally, job by job, as
a GitHub runner runs it: each job's ``run`` steps with bash, after the workflow's ``${{ }}``
expressions are replaced from the inputs, the matrix, the plan job's and the steps' outputs
and named secrets (the expressions the workflow may use are exactly the ones this module
evaluates: any other fails the test). ``uses`` steps (checkout, artifacts) are the caller's
to play."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "benchmark.yml"
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
FAKE_KEY = "sk-fake-ci-workflow-key-0123456789"  # a fake secret: must appear in no run file


def load() -> dict[str, Any]:
    data = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(data, dict)
    return data


def defaults(workflow: dict[str, Any]) -> dict[str, Any]:
    trigger = workflow.get("on") or workflow.get(True)  # type: ignore[call-overload]  # YAML 1.1: `on` is True
    inputs = trigger["workflow_dispatch"]["inputs"]
    return {name: spec.get("default", "") for name, spec in inputs.items()}


def evaluate(expr: str, ctx: dict[str, Any]) -> Any:
    """The workflow's expression forms, evaluated; anything else fails the test."""
    m = re.fullmatch(r"fromJSON\((.+)\)", expr)
    if m:
        return json.loads(str(evaluate(m.group(1), ctx)))
    m = re.fullmatch(r"secrets\[inputs\.(\w+)\]", expr)
    if m:
        return ctx["secrets"].get(ctx["inputs"][m.group(1)], "")
    m = re.fullmatch(r"(inputs|matrix|secrets|steps\.\w+\.outputs)\.(\w+)", expr)
    if m:
        scope = ctx["steps"] if m.group(1).startswith("steps") else ctx[m.group(1)]
        if m.group(1).startswith("steps"):
            scope = scope.get(m.group(1).split(".")[1], {})
        return scope.get(m.group(2), "") if m.group(1) == "secrets" else scope[m.group(2)]
    m = re.fullmatch(r"needs\.(\w+)\.outputs\.(\w+)", expr)
    if m:
        return ctx["needs"][m.group(1)][m.group(2)]
    raise AssertionError(f"expression the local runner does not know: ${{{{ {expr} }}}}")


def render(value: Any, ctx: dict[str, Any]) -> str:
    text = str(value)
    whole = EXPR.fullmatch(text.strip())
    if whole and "}}" not in whole.group(1):
        out = evaluate(whole.group(1), ctx)
        return str(out).lower() if isinstance(out, bool) else str(out)
    return EXPR.sub(lambda m: str(evaluate(m.group(1), ctx)), text)


def workspace(folder: Path) -> dict[str, str]:
    """A runner's folders, in ``folder`` rather than the checkout: its run roots
    (``RUNS_DIR``) and its downloaded artifacts (``EARLIER_DIR``)."""
    return {"RUNS_DIR": str(folder / "runs"), "EARLIER_DIR": str(folder / "earlier")}


def run_steps(workflow: dict[str, Any], job: str) -> list[dict[str, Any]]:
    """The job's ``run`` steps a local runner plays (``uses`` and install steps: the
    runner's own, and the install .ci/run has already done)."""
    return [s for s in workflow["jobs"][job]["steps"]
            if "run" in s and not str(s["run"]).startswith("python3 -m pip install")]


def step_command(step: dict[str, Any], ctx: dict[str, Any], job: str,
                 env_override: dict[str, str] | None) -> tuple[list[str], dict[str, str], Path]:
    """How a runner starts ``step``: bash's argv, its environment, its ``GITHUB_OUTPUT``
    (a fresh file outside the checkout)."""
    env = {k: render(v, ctx) for k, v in (step.get("env") or {}).items()}
    env.update(env_override or {})
    out_file = Path(tempfile.mkdtemp()) / f"github_output_{job}"
    out_file.write_text("")
    argv = ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", render(step["run"], ctx)]
    return argv, {**os.environ, **env, "GITHUB_OUTPUT": str(out_file)}, out_file


def run_job(workflow: dict[str, Any], job: str, ctx: dict[str, Any], *, cwd: Path,
            env_override: dict[str, str] | None = None,
            only: Callable[[dict[str, Any]], bool] | None = None,
            ) -> list[subprocess.CompletedProcess[str]]:
    """Runs the job's :func:`run_steps` in order (with ``only``, the steps it accepts);
    stops at the first failing step. Step outputs land in ``ctx['steps']``."""
    results = []
    for step in run_steps(workflow, job):
        if only is not None and not only(step):
            continue
        argv, env, out_file = step_command(step, ctx, job, env_override)
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=300)
        results.append(proc)
        outputs = dict(line.split("=", 1) for line in out_file.read_text().splitlines() if line)
        if step.get("id"):
            ctx.setdefault("steps", {})[step["id"]] = outputs
        if proc.returncode != 0:
            break
    return results


def plan(workflow: dict[str, Any], ctx: dict[str, Any], cwd: Path = ROOT,
         env_override: dict[str, str] | None = None) -> None:
    temp = {"RUNNER_TEMP": tempfile.mkdtemp()}  # the runner's own, never the checkout's
    [proc] = run_job(workflow, "plan", ctx, cwd=cwd, env_override={**temp, **(env_override or {})})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ctx["needs"] = {"plan": {k: render(v, ctx)
                             for k, v in workflow["jobs"]["plan"]["outputs"].items()}}


def selected(run_root: Path) -> list[str]:
    manifest = json.loads((run_root / "run_manifest.json").read_text())
    return list(manifest["selection"]["instance_ids"])


def no_key_in(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            assert FAKE_KEY.encode() not in path.read_bytes(), f"the key is in {path}"


def agent_checkout(tmp_path: Path, version: str | None = None) -> dict[str, str]:
    """A clean agent checkout and its commit, standing in for the agent step's outputs (this
    checkout may hold a developer's uncommitted changes, which the seed gate refuses);
    ``version``: its VERSION file (what an agent server built from it reports)."""
    repo = tmp_path / "agent_src"
    if repo.exists():
        return {"AGENT_REPO_DIR": str(repo), "AGENT_REF": subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True,
            text=True).stdout.strip()}
    repo.mkdir()
    (repo / "agent.txt").write_text("the agent under test\n")
    if version is not None:
        (repo / "VERSION").write_text(version + "\n")
    return {"AGENT_REPO_DIR": str(repo), "AGENT_REF": commit_all(repo, "agent")}


def commit_all(folder: Path, message: str) -> str:
    """``folder`` made a git checkout with everything in it committed; its HEAD."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(folder)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", message], check=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


def base_ctx(**inputs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    workflow = load()
    values = defaults(workflow)
    values.update(inputs)
    return workflow, {"inputs": values, "secrets": {"HARNESS_MODEL_API_KEY": FAKE_KEY,
                                                    "OPENROUTER_API_KEY": FAKE_KEY},
                      "matrix": {}, "steps": {}}


def spawn_job(workflow: dict[str, Any], job: str, ctx: dict[str, Any], *, cwd: Path,
              env_override: dict[str, str], log: Path, work: str) -> subprocess.Popen[bytes]:
    """The job as a runner of its own: the ``run`` steps before the one named ``work...``
    played by :func:`run_job`, that one (the job's work) started in a session of its own
    (one process tree, killable as a machine dies), its output in ``log``; the steps after
    it are the caller's (:func:`run_job` with ``only``)."""
    steps = run_steps(workflow, job)
    at = next(i for i, s in enumerate(steps) if str(s.get("name", "")).startswith(work))
    for proc in run_job({"jobs": {job: {"steps": steps[:at]}}}, job, ctx, cwd=cwd,
                        env_override=env_override):
        assert proc.returncode == 0, proc.stdout + proc.stderr
    argv, env, _ = step_command(steps[at], ctx, job, env_override)
    with log.open("wb") as sink:
        return subprocess.Popen(argv, cwd=cwd, env=env, stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True)
