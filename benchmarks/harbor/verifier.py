"""A Harbor task's verifier, run as Harbor runs it, alone, its reward read as untrusted input.

Harbor (shared mode) copies ``tests/`` to ``/tests`` once the agent is done, runs
``(/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1`` in the agent's container, ignores
its exit code, and reads ``/logs/verifier/reward.json`` (a flat object of named numbers),
else ``reward.txt`` (one number, named ``reward``). Here, before it runs: every process the
agent left is stopped (a writer it left behind, a fork bomb); ``/logs`` is root's again,
``/tests`` and ``/logs/verifier`` are made anew, and the latter is checked empty through the
engine (not through the container's tools, which a root agent may have replaced); the
verifier's Python does not import from the working directory. After it, ``/logs/verifier``
is copied out through the engine, bounded, links kept as links, and the reward is read from
that copy and parsed strictly (finite numbers; the score within 0..1).

Outcomes, as Harbor counts them (an errored trial is a 0, never retried): no reward file,
an empty, unparseable or out-of-range one, a verifier past its ``timeout_sec``, and a
container whose state keeps the judge from running (processes that will not stop, tools
that cannot stage) are the agent's failure; Docker failing is infrastructure.
"""

from __future__ import annotations

import json
import math
import shlex
import shutil
from pathlib import Path
from typing import Any

from benchmarks.harbor.tasks import HarborTask, resolve_env
from harness.api import Trial, Verdict, read_untrusted_text

LOGS = "/logs/verifier"
MAX_REWARD_BYTES = 64 << 10
MAX_REWARD_KEYS = 64
STDOUT_KEEP = 256 << 10
COPY_BYTES = 64 << 20  # what the verifier may leave in /logs/verifier, copied out
# The verifier's Python does not import from its working directory (the agent's): a json.py
# the agent left there is not the json module
SAFE_ENV = {"PYTHONSAFEPATH": "1", "PYTHONDONTWRITEBYTECODE": "1"}


def _sh(sandbox: Any, script: str, *, user: str = "root", timeout: float = 120.0,
        env: dict[str, str] | None = None, workdir: str | None = None,
        keep: int = MAX_REWARD_BYTES + 1) -> Any:
    return sandbox.exec(["bash", "-c", script], user=user, timeout=timeout, env=env,
                        workdir=workdir, max_output=keep)


def _stage(sandbox: Any, task: HarborTask, user: str) -> str | None:
    """Fresh ``/tests`` (the task's) and ``/logs/verifier`` (the verifier's), ``/logs``
    root's; None, or why the agent's container could not be staged."""
    res = _sh(sandbox, "{ [ -L /logs ] && rm -f /logs; } ; mkdir -p /logs && chown 0:0 /logs "
                       f"&& chmod 0755 /logs && rm -rf /tests {LOGS} && mkdir -p /tests {LOGS}"
                       f" && chown {shlex.quote(user)} {LOGS} && chmod 0755 {LOGS}", timeout=60)
    if not res.ok:
        return f"staging exited {res.exit_code}{' (timed out)' if res.timed_out else ''}"
    sandbox.copy_in(task.folder / "tests", "/tests", uid=0, gid=0)
    _sh(sandbox, "chmod +x /tests/test.sh", timeout=60)
    return None


def parse_reward(name: str, raw: bytes) -> tuple[dict[str, float] | None, str | None]:
    """(named rewards, None) or (None, the reason it is not a reward)."""
    text = raw.decode("utf-8", errors="replace").strip()
    if not text:
        return None, "reward_empty"
    try:
        if name == "reward.txt":
            values: dict[str, Any] = {"reward": float(text)}
        else:
            values = json.loads(text)
    except ValueError:
        return None, "reward_invalid"
    if not isinstance(values, dict) or not values or len(values) > MAX_REWARD_KEYS:
        return None, "reward_invalid"
    out: dict[str, float] = {}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None, "reward_invalid"
        if not math.isfinite(float(value)):
            return None, "reward_invalid"
        out[str(key)[:200]] = float(value)
    return out, None


def verify(trial: Trial, sandbox: Any, task: HarborTask, workdir: str) -> Verdict:
    """Run the task's tests on what the agent left, alone; the verdict."""
    cfg = task.config
    user = str(cfg.verifier.user) if cfg.verifier.user is not None else "root"
    agent_user = str(cfg.agent.user) if cfg.agent.user is not None else "root"
    survivors = trial.stop_agent(sandbox, agent_user)
    if survivors:
        return _failed("agent_processes_survived", f"the agent's processes {survivors[:200]} "
                                                   "outlived it")
    problem = _stage(sandbox, task, user)
    if problem is None and not _empty(trial, sandbox):
        problem = f"{LOGS} was not empty once staged"
    if problem is not None:  # the agent's container broke its judge's tools
        return _failed("verifier_stage_failed", problem)
    env = {**resolve_env(cfg.environment.env, task.name),
           **resolve_env(cfg.verifier.env, task.name), **SAFE_ENV}
    res = _sh(sandbox, f"(/tests/test.sh) > {LOGS}/test-stdout.txt 2>&1", user=user,
              timeout=cfg.verifier.timeout_sec, env=env, workdir=workdir)
    details: dict[str, Any] = {"verifier_exit_code": res.exit_code,
                               "verifier_wall_s": round(res.wall_s, 3)}
    if res.timed_out:
        return Verdict(outcome="agent_failed", reason_code="verifier_timeout",
                       error=f"the verifier ran past its {cfg.verifier.timeout_sec:g} s",
                       eval_status="timeout", details=details)
    out = trial.instance_dir / "verifier"
    if not trial.copy_out(sandbox, LOGS, out, max_bytes=COPY_BYTES):
        return _failed("reward_invalid", f"{LOGS} is over {COPY_BYTES >> 20} MiB", details)
    _keep_stdout(trial, out / "test-stdout.txt")
    return _reward(out, details)


def _empty(trial: Trial, sandbox: Any) -> bool:
    """``/logs/verifier`` seen through the engine (not the container's tools): empty."""
    probe = trial.instance_dir / "verifier-staged"
    ok = trial.copy_out(sandbox, LOGS, probe, max_bytes=1 << 20) and probe.is_dir() \
        and not any(probe.iterdir())
    shutil.rmtree(probe, ignore_errors=True)
    return ok


def _reward(out: Path, details: dict[str, Any]) -> Verdict:
    """The reward from the verifier's files as copied out (links never read)."""
    for name in ("reward.json", "reward.txt"):
        path = out / name
        if not path.exists() and not path.is_symlink():
            continue
        try:
            raw = read_untrusted_text(path, MAX_REWARD_BYTES)
        except (OSError, ValueError):
            return _failed("reward_invalid", f"{LOGS}/{name}: not a regular file of at most "
                                             f"{MAX_REWARD_BYTES} bytes", details)
        rewards, problem = parse_reward(name, raw.encode())
        if rewards is None:
            return _failed(problem or "reward_invalid", f"{LOGS}/{name}: not a reward",
                           details)
        score = rewards.get("reward", next(iter(rewards.values())))
        if not 0.0 <= score <= 1.0:
            return _failed("reward_out_of_range", f"{LOGS}/{name}: a score of {score:g} is "
                                                  "outside 0..1", {**details, "rewards": rewards})
        return Verdict(score=score, resolved=score >= 1.0,
                       details={**details, "rewards": rewards, "reward_file": name})
    return _failed("reward_missing", f"the verifier wrote no {LOGS}/reward.json or "
                                     "reward.txt", details)


def _failed(reason: str, error: str, details: dict[str, Any] | None = None) -> Verdict:
    return Verdict(outcome="agent_failed", reason_code=reason, error=error,
                   eval_status="failed", details=details or {})


def _keep_stdout(trial: Trial, path: Path) -> None:
    """The verifier's output, its first 256 KiB, in the instance folder."""
    try:
        data = read_untrusted_text(path, COPY_BYTES)[:STDOUT_KEEP]
    except (OSError, ValueError):
        return
    kept = trial.instance_dir / "verifier-stdout.txt"
    kept.write_text(data, encoding="utf-8", errors="replace")
    trial.output("verifier_stdout", kept)
