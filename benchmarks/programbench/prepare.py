"""``harness programbench prepare --container ID --instance IID --output RUN``: prepare-only.

The specification's ``run_programbench.py`` mode: with a cleanroom container already running
(started by hand, or kept by an earlier run), write the task body an agent server would get
(``ouroboros_task_body.json``) and package the container's workspace as the submission,
without submitting anything. The output is ``RUN/<iid>/`` (``RUN`` must not exist), which is
directly a ``programbench eval`` source, scored like any other package.

The workspace is the agent's, so it is packaged as a run packages it: streamed out of the
container (no host copy, no host program run on it), the reference binary left out by name
and by its bytes (hashed inside the container as root), symlinks and oversize trees refused.
Nothing in the container is stopped or changed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import docker
from docker.errors import APIError, NotFound
from pydantic import BaseModel

from benchmarks.programbench.collect import PROBE_TIMEOUT_S, export_submission, probe_only
from benchmarks.programbench.instruction import render_instruction
from benchmarks.programbench.task_body import REFERENCE_NAME, SOURCE, agent_terms
from benchmarks.programbench.task_body import WORKSPACE_BACKEND_PATH as WORKSPACE
from benchmarks.programbench.tasks import PBInstance, instances_by_id
from benchmarks.programbench.workspace import REFERENCE_CANDIDATES  # published, and ours
from harness.api import (
    DockerUnavailable,
    Sandbox,
    SandboxSpec,
    atomic_write_json,
    atomic_write_text,
    get_client,
)

BODY_NAME = "ouroboros_task_body.json"


class PrepareError(ValueError):
    """One line naming the input and the fix."""


class Prepared(BaseModel):
    instance_id: str
    container: str
    image: str
    folder: str
    files: int
    sha256: str
    reference_dropped: bool


def _instance(iid: str) -> PBInstance:
    inst = instances_by_id().get(iid)
    if inst is None:
        raise PrepareError(f"--instance {iid} is not a ProgramBench task of this installation; "
                           f"pass an id from the package's task list")
    return inst


def _container(client: docker.DockerClient, ref: str, inst: PBInstance) -> Sandbox:
    """The running container ``ref``, checked to run the task's cleanroom image."""
    try:
        info = client.api.inspect_container(ref)
    except NotFound:
        raise PrepareError(f"--container {ref}: no such container; pass the id or name of "
                           f"the running cleanroom container") from None
    if not (info.get("State") or {}).get("Running"):
        raise PrepareError(f"--container {ref} is not running; start it, the workspace is "
                           f"read from the live container")
    image = (info.get("Config") or {}).get("Image") or ""
    tags = client.images.get(info["Image"]).tags
    if inst.image_ref() not in tags and image != inst.image_ref():
        raise PrepareError(f"--container {ref} runs {image or info['Image'][:19]}, not "
                           f"{inst.image_ref()}; pass the container of --instance "
                           f"{inst.instance_id}")
    name = str(info.get("Name", ref)).lstrip("/")
    spec = SandboxSpec(image=info["Image"], run_id="prepare", instance_id=inst.instance_id,
                       run_root=Path("."), user="agent", workdir=WORKSPACE)
    return Sandbox(client, info["Id"], name, spec)


def _protect_reference(sandbox: Sandbox) -> None:
    """The reference's bytes, hashed as root inside the container: a copy under any name is
    left out of the package."""
    script = ('for f in "$@"; do [ -f "$f" ] && [ ! -L "$f" ] || continue; '
              'printf "%s %s\\n" "$(sha256sum < "$f" | cut -d" " -f1)" "$(wc -c < "$f")"; '
              'done')
    res = sandbox.exec(["/bin/sh", "-c", script, "sh", *REFERENCE_CANDIDATES], user="root",
                       timeout=PROBE_TIMEOUT_S, workdir="/")
    for line in res.stdout.decode().splitlines():
        words = line.split()
        if len(words) == 2 and len(words[0]) == 64 and words[1].isdigit():
            sandbox.protected_hashes[words[0]] = int(words[1])


def prepare(container: str, iid: str, output: Path, *, timeout_sec: float) -> Prepared:
    """See the module docstring; :class:`PrepareError` on bad input, nothing written."""
    output = Path(output)
    if output.exists():
        raise PrepareError(f"--output {output} already exists; pass a new folder")
    inst = _instance(iid)
    try:
        client = get_client()
    except DockerUnavailable as exc:
        raise PrepareError(f"no Docker engine ({exc}); start it or set DOCKER_HOST") from None
    sandbox = _container(client, container, inst)
    _protect_reference(sandbox)
    folder = output / iid
    folder.mkdir(parents=True)
    facts = probe_only(sandbox, WORKSPACE)
    info = export_submission(sandbox, folder / "submission.tar.gz", facts=facts,
                             protected_paths=["executable", REFERENCE_NAME],
                             workspace=WORKSPACE)
    body = gateway_task(inst, sandbox, folder, timeout_sec)
    atomic_write_text(folder / BODY_NAME, body.model_dump_json(indent=2, by_alias=True,
                                                               exclude_none=True) + "\n")
    atomic_write_json(folder / "submission_info.json", info)
    return Prepared(instance_id=iid, container=sandbox.name, image=inst.image_ref(),
                    folder=str(folder), files=info.file_count, sha256=info.sha256,
                    reference_dropped=bool(info.protected_dropped))


def gateway_task(inst: PBInstance, sandbox: Sandbox, folder: Path,
                 timeout_sec: float) -> BaseModel:
    """The task the gateway agent would submit for ``inst`` in ``sandbox`` (it builds it)."""
    from harness.api import AgentRequest, agent_class

    request = AgentRequest(instance_id=inst.instance_id, instance_dir=folder,
                           instruction=render_instruction(inst), sandbox=sandbox,
                           timeout_sec=timeout_sec, adapter=SOURCE, terms=agent_terms(inst))
    task = agent_class("gateway").task_preview(request)
    assert task is not None
    return task


def prepare_command(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="harness programbench prepare",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--container", required=True, help="running cleanroom container")
    parser.add_argument("--instance", required=True, metavar="IID", help="its task id")
    parser.add_argument("--output", required=True, type=Path, help="new folder (RUN)")
    parser.add_argument("--timeout-sec", type=float, default=21600.0,
                        help="the body's timeout_sec (default 21600, the official 6 h)")
    args = parser.parse_args(None if argv is None else list(argv))
    try:
        done = prepare(args.container, args.instance, args.output, timeout_sec=args.timeout_sec)
    except (PrepareError, APIError, OSError) as exc:
        print(f"harness programbench prepare: {exc}", file=sys.stderr)
        return 2
    print(f"prepared {done.folder}: submission.tar.gz ({done.files} files, sha256 "
          f"{done.sha256[:12]}) and {BODY_NAME}; nothing was submitted")
    print(f"score with: programbench eval {args.output}")
    return 0
