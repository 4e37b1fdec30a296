"""The Harbor task format as a declared benchmark: each task folder is an instance.

The environment's Dockerfile is built as it is (``--harbor-image-map`` builds a ``FROM`` this
engine lacks from a local image); the agent works in the task's workdir as the task's agent
user (Harbor's default: the image's, root); the oracle copies ``solution/`` to ``/solution``
and runs ``solve.sh``; the verifier is :mod:`benchmarks.harbor.verifier`. Sandboxes have no
network, whatever the task's ``network_mode`` (recorded on the row).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harbor.tasks import HarborTask, load_tasks, resolve_env
from benchmarks.harbor.verifier import verify
from harness.api import (
    DeclaredBenchmark,
    InfraError,
    InstanceSpec,
    RefusalError,
    SandboxPlan,
    Trial,
    Verdict,
)

if TYPE_CHECKING:
    from harness.api import AgentTerms, OraclePlan

FORMAT_VERSION = "harbor-task-format-1.3"


def image_map(given: list[str] | None) -> dict[str, str]:
    """``--harbor-image-map FROM=LOCAL`` (repeatable) as a mapping."""
    out = {}
    for item in given or []:
        src, sep, dst = item.partition("=")
        if not sep or not src or not dst:
            raise RefusalError(f"--harbor-image-map {item!r}: write it as IMAGE=LOCAL_IMAGE",
                               stage="options", reason="harbor_option_invalid")
        out[src] = dst
    return out


class HarborBenchmark(DeclaredBenchmark):
    name = "harbor"
    marker_names = ("difficulty", "category")
    status_vocabulary: dict[Any, str] = {}

    def instances(self, config: Any) -> list[InstanceSpec]:
        root = config.getoption("harbor_tasks")
        if not root:  # a session over every benchmark (``pytest`` in the root) runs none
            return []
        out = []
        for task in load_tasks(Path(root)):
            meta = task.config.metadata
            markers = {k: str(meta[k]) for k in self.marker_names if isinstance(
                meta.get(k), str | int | float)}
            given = meta.get("tags")
            tags = [str(t) for t in given if isinstance(t, str | int)] \
                if isinstance(given, list) else []
            out.append(InstanceSpec(instance_id=task.name, markers=markers, keywords=tags,
                                    data=task))
        return out

    def version(self) -> str:
        return FORMAT_VERSION

    def result_config(self, config: Any) -> dict[str, Any]:
        return {"harbor_image_map": image_map(config.getoption("harbor_image_map"))}

    # the trial's steps ---------------------------------------------------------------
    def instruction(self, trial: Trial) -> str:
        task: HarborTask = trial.data
        return task.instruction

    def agent_timeout(self, trial: Trial) -> float:
        task: HarborTask = trial.data
        return task.agent_timeout_s

    def prepare(self, trial: Trial) -> str:
        task: HarborTask = trial.data
        mapping = image_map(trial.option("harbor_image_map"))
        env = task.config.environment
        trial.details.update({"network_mode": env.network_mode, "sandbox_network": "none",
                              "storage_mb_not_enforced": env.storage_mb})
        if task.dockerfile is not None:
            return trial.build_image(task.folder / "environment", "harbor/task",
                                     from_map=mapping)
        if env.docker_image:
            return trial.pull_image(mapping.get(env.docker_image, env.docker_image))
        raise InfraError(f"Harbor task {task.folder}: its environment went away",
                         "harbor_environment_missing")

    def sandbox(self, trial: Trial, image: str) -> SandboxPlan:
        task: HarborTask = trial.data
        env = task.config.environment
        user = task.config.agent.user
        workdir = env.workdir or (None if image == "<image>" else trial.image_workdir(image))
        return SandboxPlan(image=image, user=str(user) if user is not None else "root",
                           workdir=workdir or "/", cpus=env.cpus or 1.0,
                           memory=f"{env.memory_mb}m" if env.memory_mb else "2g",
                           pids_limit=4096, env=resolve_env(env.env, task.name))

    def has_oracle(self, trial: Trial) -> bool:
        task: HarborTask = trial.data
        return task.has_solution

    def oracle(self, trial: Trial, sandbox: Any) -> OraclePlan | None:
        from harness.api import OraclePlan

        task: HarborTask = trial.data
        if not task.has_solution:
            return None
        env = {"DEBIAN_FRONTEND": "noninteractive",
               **resolve_env(task.config.solution.env, task.name)}
        exports = " ".join(f"{k}={_quote(v)}" for k, v in env.items())
        return OraclePlan(
            folders=[(str(task.folder / "solution"), "/solution")],
            commands=["mkdir -p /logs/agent 2>/dev/null; out=/logs/agent/oracle.txt; "
                      "[ -w /logs/agent ] || out=/tmp/oracle.txt; "
                      f"(export {exports}; if [ -x /solution/solve.sh ]; then "
                      "/solution/solve.sh; else bash /solution/solve.sh; fi) > $out 2>&1"],
            timeout_sec=task.agent_timeout_s)

    def score(self, trial: Trial, sandbox: Any, artifact: Any) -> Verdict:
        task: HarborTask = trial.data
        return verify(trial, sandbox, task, sandbox.spec.workdir or "/")

    def agent_terms(self, trial: Trial) -> AgentTerms:
        from harness.api import AgentTerms

        task: HarborTask = trial.data
        return AgentTerms(metadata={"harbor_task": task.name})


def _quote(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"
