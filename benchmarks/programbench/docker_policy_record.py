"""The record of :mod:`benchmarks.programbench.docker_policy` for ``official_eval.json``
(kept apart so the shim, run for every docker call, starts without pydantic)."""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field

from benchmarks.programbench.docker_policy import CREATE_COMMANDS


class DockerPolicy(BaseModel):
    """What the policy did during one ``programbench eval`` call (``official_eval.json``)."""

    model_config = ConfigDict(extra="forbid")

    network: str = "none"
    label: str = ""  # every container of this eval call carries harness.pb_eval=<label>
    real_docker: str = ""
    containers_created: int = 0
    results_guarded: int = 0  # test runs whose pytest loaded the results guard
    # containers started from the image the submission's build left (the eval's
    # ``programbench-compiled/<iid>:<hex>``): their failures are the submission's
    built_containers: list[str] = Field(default_factory=list)
    refused: list[str] = Field(default_factory=list)
    build_files_removed: list[str] = Field(default_factory=list)
    # the uid the submission's build ran as (None: as root, an older policy)
    build_user: int | None = None
    # what the build left outside its workspace and home (removed before the commit)
    program_files_swept: list[str] = Field(default_factory=list)
    # how the build's changes were listed: its upper layer ("layer") or "docker_diff"
    build_changes_from: str = ""
    python_calls: int = 0  # docker calls the policy decided on in Python (the rest: sh only)
    python_s: float = 0.0  # seconds the policy spent on them (their docker calls included)
    # wall-clock times (epoch s) of the eval's steps, for the row's timings
    first_container_at: float | None = None
    build_checked_at: float | None = None


def summarize(log_text: str, real_docker: str = "", instance_id: str | None = None,
              label: str = "") -> DockerPolicy:
    """The policy's record of one eval call, from its log (build removals of ``instance_id``
    only, when given: the eval commits ``programbench-compiled/<instance_id>:<hex>``)."""
    policy = DockerPolicy(real_docker=real_docker, label=label)
    for line in log_text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        took = entry.get("took_s")
        if isinstance(took, (int, float)):
            policy.python_calls += 1
            policy.python_s = round(policy.python_s + float(took), 3)
        ts = entry.get("ts")
        if entry.get("op") in CREATE_COMMANDS and policy.first_container_at is None and (
                isinstance(ts, (int, float))):
            policy.first_container_at = float(ts)
        if entry.get("op") == "commit_checked" and isinstance(ts, (int, float)):
            policy.build_checked_at = float(ts)
        if entry.get("refused"):
            policy.refused.append(_text(entry["refused"]))
        elif entry.get("op") == "exec" and isinstance(entry.get("build_user"), int):
            policy.build_user = entry["build_user"]
        elif entry.get("op") == "sweep":
            policy.program_files_swept += [_text(p) for p in entry.get("swept", [])]
        elif entry.get("op") == "exec" and entry.get("results_guard"):
            policy.results_guarded += 1
        elif entry.get("op") in CREATE_COMMANDS:
            policy.containers_created += 1
            image = str(entry.get("image", ""))
            built = f"programbench-compiled/{instance_id}:" if instance_id else (
                "programbench-compiled/")
            if entry.get("id") and image.startswith(built):
                policy.built_containers.append(str(entry["id"]))
        elif entry.get("op") == "commit" and (instance_id is None or str(
                entry.get("image", "")).startswith(f"programbench-compiled/{instance_id}:")):
            policy.build_files_removed += [_text(p) for p in entry.get("build_files_removed", [])]
            policy.build_changes_from = str(entry.get("changes_from", ""))
    return policy


def _text(value: object) -> str:
    """``value`` as text JSON can hold: a lone surrogate (a name's byte that is not UTF-8, as
    the log may carry it) is written as ``\\udcff`` rather than failing the record."""
    return str(value).encode("utf-8", "backslashreplace").decode("utf-8")
