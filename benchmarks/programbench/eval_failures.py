"""Why ``programbench eval`` left an instance without an eval.json: one CLI call's record
(:class:`CliRun`), the error code and message read from its output (:func:`cli_failure`),
and who caused it (:func:`failure_cause`: the submission or the infrastructure)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from benchmarks.programbench.docker_policy import BUILD_TAMPER_MARKER

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)):\s?(.*)$")


class CliRun(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cmd: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    real_docker: str = ""
    policy_log: str = ""
    policy_label: str = ""
    started_at: float = 0.0  # epoch s, when the CLI was started
    policy_install_s: float = 0.0
    sweep_s: float = 0.0
    account_key: str = Field(default="", exclude=True)  # the results guard's key: not kept


def _clean_lines(text: str) -> list[str]:
    lines: list[str] = []
    for raw in _ANSI.sub("", text).splitlines():
        line = raw.rsplit("\r", 1)[-1].rstrip()  # keep what a terminal would show
        if line.strip():
            lines.append(line)
    return lines


def cli_failure(run: CliRun, instance_id: str) -> tuple[str, str]:
    """``(error_code, message)`` for an instance the CLI left without an eval.json."""
    if run.timed_out:
        return "timeout", f"programbench eval did not finish within the timeout ({run.cmd})"
    err_lines = _clean_lines(run.stderr)
    code = None
    for line in _clean_lines(run.stdout):
        if line.lstrip().startswith(instance_id) and "ERROR:" in line:
            code = line.split("ERROR:", 1)[1].split()[0]
    message_lines: list[str] = []
    marker = f"Error evaluating {instance_id}:"
    for i, line in enumerate(err_lines):
        if marker in line:
            message_lines = [line[line.index(marker) :]]
            for follow in err_lines[i + 1 :]:
                if follow.startswith("Traceback"):
                    break
                message_lines.append(follow)
            break
    if not message_lines:
        message_lines = err_lines[-15:] or _clean_lines(run.stdout)[-15:]
    if code is None:
        for line in reversed(err_lines):
            match = _EXC_LINE.match(line.strip())
            if match:
                code = match.group(1).rsplit(".", 1)[-1]
                break
    message = "\n".join(message_lines).strip() or f"programbench eval exited {run.returncode}"
    return code or "no_eval_json", message[-4000:]


# Raised while the eval reads a branch's results.xml, which the submission's own processes
# can rewrite (same container, same root user): a truncated or forged file is theirs.
SUBMISSION_EXCEPTIONS = frozenset({"XmlParseError", "EmptyTestResultError", "UnicodeDecodeError"})
# Unpacking the submission (or a branch's tests over the workspace the build left) failed in
# the container's tar: the archive is ours and well formed, so the workspace's shape did it.
UNPACK_MARKER = "tar stream into container failed"
# Our side: the engine, the disk, the policy shim.
INFRA_MARKERS = (
    "Error response from daemon",
    "Cannot connect to the Docker daemon",
    "No space left on device",
    "docker policy:",
    "Failed to start container",
    "docker commit failed",
    "No such container",
)


def failure_cause(code: str, message: str,
                  built_containers: list[str] | None = None) -> Literal["agent", "infra"]:
    """Who made the CLI end an instance without a verdict (see :func:`cli_failure`).

    A build the docker policy refused to commit, or a container started from the image the
    submission's build left that is not running (its ``sleep`` replaced, its init killed), is
    the submission's doing too."""
    if BUILD_TAMPER_MARKER in message:  # the policy refused to commit what compile.sh did
        return "agent"
    for cid in built_containers or []:
        if len(cid) >= 12 and (cid in message or cid[:12] in message) and (
                "is not running" in message):
            return "agent"
    if any(marker in message for marker in INFRA_MARKERS):
        return "infra"
    if code in SUBMISSION_EXCEPTIONS or UNPACK_MARKER in message:
        return "agent"
    return "infra"
