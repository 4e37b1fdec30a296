"""A Harbor task's verifier, run as Harbor runs it, with the reward read as untrusted input.

Harbor (shared mode) copies ``tests/`` to ``/tests`` once the agent is done, runs
``(/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1`` in the agent's container, ignores
its exit code, and reads ``/logs/verifier/reward.json`` (a flat object of named numbers),
else ``reward.txt`` (one number, named ``reward``). Here, before it runs, ``/tests`` and
``/logs/verifier`` are removed and made again by root (what the agent left there is gone;
an agent that is not root cannot write them), and the reward files are read bounded and
parsed strictly.

Outcomes, as Harbor counts them (an errored trial is a 0, never retried): no reward file,
an empty or unparseable one, and a verifier past its ``timeout_sec`` are the agent's
failure (reasons ``reward_missing``, ``reward_empty``, ``reward_invalid``,
``verifier_timeout``); Docker failing to run the verifier is infrastructure.
"""

from __future__ import annotations

import json
import math
import shlex
from typing import Any

from benchmarks.harbor.tasks import HarborTask, resolve_env
from harness.api import InfraError, Trial, Verdict

LOGS = "/logs/verifier"
MAX_REWARD_BYTES = 64 << 10
MAX_REWARD_KEYS = 64
STDOUT_KEEP = 256 << 10


def _sh(sandbox: Any, script: str, *, user: str = "root", timeout: float = 120.0,
        env: dict[str, str] | None = None, workdir: str | None = None,
        keep: int = MAX_REWARD_BYTES + 1) -> Any:
    return sandbox.exec(["bash", "-c", script], user=user, timeout=timeout, env=env,
                        workdir=workdir, max_output=keep)


def _stage(sandbox: Any, task: HarborTask, user: str) -> None:
    """Fresh ``/tests`` (the task's) and ``/logs/verifier`` (writable by the verifier)."""
    res = _sh(sandbox, f"rm -rf /tests {LOGS} && mkdir -p /tests {LOGS} && "
                       f"chown {shlex.quote(user)} {LOGS} && chmod 0755 {LOGS}")
    if not res.ok:
        raise InfraError(f"cannot stage the verifier: {res.stderr.decode(errors='replace')[:300]}",
                         "verifier_stage_failed")
    sandbox.copy_in(task.folder / "tests", "/tests", uid=0, gid=0)
    _sh(sandbox, "chmod +x /tests/test.sh")


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


def _read(sandbox: Any, name: str) -> bytes | None:
    res = _sh(sandbox, f'f={LOGS}/{name}; [ -f "$f" ] && [ ! -L "$f" ] || exit 3; '
                       f'head -c {MAX_REWARD_BYTES + 1} "$f"')
    if res.exit_code == 3:
        return None
    if not res.ok:
        raise InfraError(f"cannot read {LOGS}/{name}", "verifier_read_failed")
    return bytes(res.stdout)


def verify(trial: Trial, sandbox: Any, task: HarborTask, workdir: str) -> Verdict:
    """Run the task's tests on what the agent left; the verdict."""
    cfg = task.config
    user = str(cfg.verifier.user) if cfg.verifier.user is not None else "root"
    _stage(sandbox, task, user)
    env = {**resolve_env(cfg.environment.env, task.name), **resolve_env(cfg.verifier.env,
                                                                        task.name)}
    res = _sh(sandbox, f"(/tests/test.sh) > {LOGS}/test-stdout.txt 2>&1", user=user,
              timeout=cfg.verifier.timeout_sec, env=env, workdir=workdir)
    _keep_stdout(trial, sandbox)
    details: dict[str, Any] = {"verifier_exit_code": res.exit_code,
                               "verifier_wall_s": round(res.wall_s, 3)}
    if res.timed_out:
        return Verdict(outcome="agent_failed", reason_code="verifier_timeout",
                       error=f"the verifier ran past its {cfg.verifier.timeout_sec:g} s",
                       eval_status="timeout", details=details)
    for name in ("reward.json", "reward.txt"):
        raw = _read(sandbox, name)
        if raw is None:
            continue
        rewards, problem = parse_reward(name, raw[:MAX_REWARD_BYTES])
        if len(raw) > MAX_REWARD_BYTES:
            rewards, problem = None, "reward_invalid"
        if rewards is None:
            return Verdict(outcome="agent_failed", reason_code=problem,
                           error=f"{LOGS}/{name}: not a reward ({problem})",
                           eval_status="failed", details=details)
        score = rewards.get("reward", next(iter(rewards.values())))
        return Verdict(score=score, resolved=score >= 1.0,
                       details={**details, "rewards": rewards, "reward_file": name})
    return Verdict(outcome="agent_failed", reason_code="reward_missing",
                   error=f"the verifier wrote no {LOGS}/reward.json or reward.txt",
                   eval_status="failed", details=details)


def _keep_stdout(trial: Trial, sandbox: Any) -> None:
    """The verifier's output, its first 256 KiB, in the instance folder."""
    res = _sh(sandbox, f'f={LOGS}/test-stdout.txt; [ -f "$f" ] && [ ! -L "$f" ] && '
                       f'head -c {STDOUT_KEEP} "$f"', keep=STDOUT_KEEP)
    if res.ok:
        path = trial.instance_dir / "verifier-stdout.txt"
        path.write_bytes(bytes(res.stdout)[:STDOUT_KEEP])
        trial.output("verifier_stdout", path)
