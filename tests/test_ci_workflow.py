"""The example CI workflow (``.github/workflows/benchmark.yml``) run locally, job by job.

Each job's ``run`` steps are executed with bash as a GitHub runner executes them, after the
workflow's ``${{ }}`` expressions are replaced from the inputs, the matrix, the plan job's
outputs and named secrets (the expressions the workflow may use are exactly the ones this
file evaluates: any other fails the test). The shard jobs run as dry runs and must be
accepted; their selections must partition the benchmark; the merge job must merge them; a
paid run without the campaign secret is refused before pytest starts; the key never lands
in a run root.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.cowork_bench import PINNED_COMMIT

ROOT = Path(__file__).resolve().parents[1]
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


def run_job(workflow: dict[str, Any], job: str, ctx: dict[str, Any], *, cwd: Path,
            env_override: dict[str, str] | None = None) -> list[subprocess.CompletedProcess[str]]:
    """Runs the job's ``run`` steps in order (``uses`` and install steps: skipped);
    stops at the first failing step. Step outputs land in ``ctx['steps']``."""
    results = []
    for step in workflow["jobs"][job]["steps"]:
        if "run" not in step or str(step["run"]).startswith("python3 -m pip install"):
            continue  # the runner's own steps, and the install .ci/run has already done
        env = {k: render(v, ctx) for k, v in (step.get("env") or {}).items()}
        env.update(env_override or {})
        out_file = Path(tempfile.mkdtemp()) / f"github_output_{job}"  # never in the checkout
        out_file.write_text("")
        proc = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", render(step["run"], ctx)],
            cwd=cwd, env={**os.environ, **env, "GITHUB_OUTPUT": str(out_file)},
            capture_output=True, text=True, timeout=300)
        results.append(proc)
        outputs = dict(line.split("=", 1) for line in out_file.read_text().splitlines() if line)
        if step.get("id"):
            ctx.setdefault("steps", {})[step["id"]] = outputs
        if proc.returncode != 0:
            break
    return results


def plan(workflow: dict[str, Any], ctx: dict[str, Any], cwd: Path = ROOT) -> None:
    [proc] = run_job(workflow, "plan", ctx, cwd=cwd)
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


def agent_checkout(tmp_path: Path) -> dict[str, str]:
    """A clean agent checkout and its commit, standing in for the agent step's outputs (this
    checkout may hold a developer's uncommitted changes, which the seed gate refuses)."""
    repo = tmp_path / "agent_src"
    if repo.exists():
        return {"AGENT_REPO_DIR": str(repo), "AGENT_REF": subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True,
            text=True).stdout.strip()}
    repo.mkdir()
    (repo / "agent.txt").write_text("the agent under test\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "agent"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()
    return {"AGENT_REPO_DIR": str(repo), "AGENT_REF": head}


def base_ctx(**inputs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    workflow = load()
    values = defaults(workflow)
    values.update(inputs)
    return workflow, {"inputs": values, "secrets": {"HARNESS_MODEL_API_KEY": FAKE_KEY,
                                                    "OPENROUTER_API_KEY": FAKE_KEY},
                      "matrix": {}, "steps": {}}


@pytest.mark.slow
def test_shard_jobs_partition_the_benchmark_and_merge(tmp_path: Path) -> None:
    workflow, ctx = base_ctx(agent="command", agent_command="my-agent --go",
                             model_upstream="https://openrouter.ai/api/v1",
                             solve_model="openrouter/acme/model-1", task_timeout_min="5",
                             shards="3", dry_run=True)
    plan(workflow, ctx)
    shards = evaluate("fromJSON(needs.plan.outputs.shards)", ctx)
    # 5 min + 15 of eval: 16 rounds of 4 workers in the job, 64 units a shard; 200 need 4
    assert shards == [1, 2, 3, 4]
    assert render(workflow["jobs"]["shard"]["strategy"]["matrix"]["shard"], ctx) == \
        "[1, 2, 3, 4]"
    runs = tmp_path / "runs"
    picked: dict[int, list[str]] = {}
    for shard in shards:
        ctx["matrix"] = {"shard": shard}
        root = runs / f"run-shard-{shard}"  # where the merge job's download puts it
        results = run_job(workflow, "shard", ctx, cwd=ROOT, env_override={
            "RUN_ROOT": str(root), **agent_checkout(tmp_path)})
        assert results and results[-1].returncode == 0, results[-1].stdout[-3000:] + \
            results[-1].stderr[-3000:]
        picked[shard] = selected(root)
        assert picked[shard], f"shard {shard} selected nothing"
        no_key_in(root)
    every = [iid for ids in picked.values() for iid in ids]
    assert len(every) == len(set(every)), "two shards selected the same instance"
    # the whole benchmark, as a plain dry run without shards selects it
    whole = tmp_path / "whole"
    proc = subprocess.run([sys.executable, "-m", "pytest", "benchmarks/programbench",
                           "--dry-run", "--agent", "nop", "--run-root", str(whole), "-q",
                           "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert sorted(every) == sorted(selected(whole))
    assert len(every) == 200

    results = run_job(workflow, "merge", ctx, cwd=tmp_path)
    assert all(r.returncode == 0 for r in results), [r.stderr[-2000:] for r in results]
    assert "merged 4 shards of 4: 200 units" in results[0].stdout
    assert (tmp_path / "merged" / "report" / "report.html").is_file()
    assert "no gate" in (tmp_path / "merged" / "gate.txt").read_text()


@pytest.mark.parametrize("agent", ["mini-swe-agent", "command"])
def test_a_paid_shard_without_the_campaign_secret_is_refused(tmp_path: Path, agent: str) -> None:
    workflow, ctx = base_ctx(agent=agent, agent_command="my-agent",
                             model_upstream="https://openrouter.ai/api/v1", dry_run=False)
    ctx["needs"] = {"plan": {"count": "2", "shards": "[1, 2]"}}
    ctx["matrix"] = {"shard": 1}
    root = tmp_path / "shard-1"
    proc = run_job(workflow, "shard", ctx, cwd=ROOT, env_override={
            "RUN_ROOT": str(root), **agent_checkout(tmp_path)})[-1]
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert "add the HARNESS_CAMPAIGN_URL secret" in line
    assert not root.exists()  # refused before pytest ran


def test_a_paid_command_agent_without_its_model_gateway_is_refused(tmp_path: Path) -> None:
    workflow, ctx = base_ctx(agent="command", agent_command="my-agent", dry_run=False)
    ctx["needs"] = {"plan": {"count": "1", "shards": "[1]"}}
    ctx["matrix"] = {"shard": 1}
    ctx["secrets"]["HARNESS_CAMPAIGN_URL"] = "postgresql://nobody@127.0.0.1:9/x?campaign=c"
    proc = run_job(workflow, "shard", ctx, cwd=ROOT,
                   env_override={"RUN_ROOT": str(tmp_path / "r")})[-1]
    assert proc.returncode == 2
    assert "give model_upstream" in proc.stderr  # else no per-task limit could hold


@pytest.mark.parametrize(("shards", "timeout", "says"), [
    ("four", "60", "shards 'four' is not auto or a number >= 1"),
    ("2", "60", "shards 2 is too few: 200 units at 16 per shard need"),
    ("auto", "400", "does not fit a job of 350 min"),
])
def test_a_plan_that_cannot_fit_the_job_is_refused(shards: str, timeout: str, says: str) -> None:
    workflow, ctx = base_ctx(shards=shards, task_timeout_min=timeout)
    [proc] = run_job(workflow, "plan", ctx, cwd=ROOT)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert says in line


def test_cowork_job_dry_run_on_the_fixture_checkout(tmp_path: Path) -> None:
    workflow, ctx = base_ctx()
    job = workflow["jobs"]["cowork"]
    checkout = next(s for s in job["steps"] if s.get("with", {}).get("path"))
    assert render(checkout["with"]["ref"], ctx) == PINNED_COMMIT  # the runner's pinned commit
    # The fixture stands in for the checkout: a clean git checkout whose commit is given as
    # the workflow's cowork_commit input (the pinned one's tree is not on this machine).
    fixture = tmp_path / "cowork_bench_checkout"
    shutil.copytree(ROOT / "tests" / "fixtures" / "cowork_mini", fixture)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(fixture)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "fixture"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()
    workflow, ctx = base_ctx(agent="command", agent_command="my-agent", cowork=True,
                             dry_run=True, cowork_commit=head)
    assert evaluate(job["if"], ctx) is True  # `if:` is an expression without ${{ }}
    root = tmp_path / "cowork"
    results = run_job(workflow, "cowork", ctx, cwd=ROOT,
                      env_override={"RUN_ROOT": str(root), "COWORK_ROOT": str(fixture),
                                    **agent_checkout(tmp_path)})
    assert results and results[-1].returncode == 0, results[-1].stdout[-3000:] + \
        results[-1].stderr[-3000:]
    assert selected(root), "the Cowork job selected nothing"
    no_key_in(root)


@pytest.mark.parametrize("agent", ["mini-swe-agent"])
def test_other_agent_kinds_are_accepted(tmp_path: Path, agent: str) -> None:
    workflow, ctx = base_ctx(agent=agent, solve_model="openrouter/acme/model-1",
                             key_env="OPENROUTER_API_KEY", dry_run=True,
                             select="calculator or cheat")
    plan(workflow, ctx)
    ctx["matrix"] = {"shard": 1}
    root = tmp_path / "shard-1"
    results = run_job(workflow, "shard", ctx, cwd=ROOT, env_override={
            "RUN_ROOT": str(root), **agent_checkout(tmp_path)})
    assert results[-1].returncode in (0, 5), results[-1].stdout[-3000:]  # 5: shard had none
    no_key_in(root)
