"""The offline image of the fixture ``testorg__calculator.abc1234``, built from Debian packages.

It stands in for ``programbench/testorg_1776_calculator.abc1234:task_cleanroom_v6`` (never
published) and serves both phases:

* agent phase: default user root, user ``agent`` (uid 1000), ``/workspace`` owned by
  ``agent`` and a git repository (one commit with ``README.md``), the reference program at
  ``/workspace/executable`` owned by root with mode 0111 and untracked, like a real
  cleanroom image. A script cannot run with mode 0111 (its interpreter must read it), so the
  reference is an ELF compiled here from :data:`CALCULATOR_C`, which behaves like the
  package's fixture ``calculator.sh`` (``echo $(($1 $2 $3))``) on what the tests exercise.
  It is dynamically linked against the image's Debian libc, like most real references, so
  loader-injection attacks (``LD_PRELOAD``) are exercised by the security tests.
* official eval: bash, git, python3 with pytest, pytest-xdist and pytest-timeout in
  ``/usr/bin`` (the project base image), ``safe.directory=*`` so eval's ``seed_git`` step,
  which runs as root in the agent-owned ``/workspace``, is allowed. No pip: eval's
  ``install_rerunfailures`` step fails, is tolerated, and reruns stay off.

The runner presents the reference to the agent as ``/workspace/reference_executable``
(see :mod:`benchmarks.programbench.workspace`), which the gateway's protected-artifact paths
name.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.programbench import CLEANROOM_TAG, FIXTURE_ID

if TYPE_CHECKING:
    import docker

FIXTURE_IMAGE_NAME = "programbench/" + FIXTURE_ID.replace("__", "_1776_")
FIXTURE_IMAGE = f"{FIXTURE_IMAGE_NAME}:{CLEANROOM_TAG}"
LAYER_NAME = "harness/programbench-fixture"
# Dynamically linked (the host and the image share Debian's libc), stripped.
CFLAGS = ("-O2", "-s")

CALCULATOR_C = r"""
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse(const char *prog, const char *text, long long *out) {
    char *end = NULL;
    errno = 0;
    *out = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0') {
        fprintf(stderr, "%s: invalid number: %s\n", prog, text);
        return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    long long a, b, r;
    if (argc != 4) {
        fprintf(stderr, "usage: %s A OP B\n", argv[0]);
        return 2;
    }
    if (!parse(argv[0], argv[1], &a) || !parse(argv[0], argv[3], &b)) return 1;
    const char *op = argv[2];
    if (strcmp(op, "+") == 0) r = a + b;
    else if (strcmp(op, "-") == 0) r = a - b;
    else if (strcmp(op, "*") == 0) r = a * b;
    else if (strcmp(op, "/") == 0 || strcmp(op, "%") == 0) {
        if (b == 0) {
            fprintf(stderr, "%s: division by 0\n", argv[0]);
            return 1;
        }
        r = op[0] == '/' ? a / b : a % b;
    } else {
        fprintf(stderr, "%s: unknown operator: %s\n", argv[0], op);
        return 1;
    }
    printf("%lld\n", r);
    return 0;
}
"""

README = """# calculator

`calculator A OP B` prints the integer result of `A OP B`, where OP is one of
`+`, `-`, `*`, `/` or `%`.

    $ calculator 2 + 3
    5
"""

DOCKERFILE_BODY = """\
COPY README.md /workspace/README.md
COPY executable /workspace/executable
RUN chown agent:agent /workspace/README.md \\
 && chown root:root /workspace/executable && chmod 0111 /workspace/executable \\
 && git config --system --add safe.directory '*' \\
 && runuser -l agent -c "git config --global user.name agent \\
    && git config --global user.email agent@localhost \\
    && cd /workspace && git init -q && git add README.md && git commit -q -m 'initial commit'" \\
 && bash -lc 'python3 -c "import pytest, xdist, pytest_timeout" && git --version >/dev/null'
WORKDIR /workspace
USER root
"""


# A second layout, like a published cleanroom image: default user root, NO agent user, a
# root-owned /workspace holding only README.md and the reference at /workspace/executable, no
# git repository and no safe.directory setting. The runner must adapt it (see
# benchmarks.programbench.workspace.prepare_cleanroom) and records what it changed in the row.
CLEANROOM_LAYOUT_NAME = "harness/programbench-fixture-cleanroom"
CLEANROOM_LAYOUT_BODY = """\
COPY README.md /workspace/README.md
COPY executable /workspace/executable
RUN chown -R root:root /workspace && chmod 0755 /workspace \\
 && chown root:root /workspace/executable && chmod 0111 /workspace/executable \\
 && sed -i '/^agent:/d' /etc/passwd /etc/group /etc/shadow /etc/gshadow \\
 && rm -rf /home/agent && ! grep -q '^agent:' /etc/passwd
ENV PATH=/usr/local/bin:/usr/bin:/bin
WORKDIR /workspace
USER root
"""


def ensure_cleanroom_layout_image(reference_binary: bytes) -> str:
    """Build (once) the cleanroom-layout variant of the fixture; return its image ID."""
    from harness.api import LayerRecipe, base_recipe, ensure_image

    recipe = LayerRecipe(
        name=CLEANROOM_LAYOUT_NAME,
        base=base_recipe(),
        dockerfile_body=CLEANROOM_LAYOUT_BODY,
        files={"README.md": README.encode(), "executable": reference_binary},
    )
    return ensure_image(recipe).image_id


class FixtureBuildError(RuntimeError):
    """The fixture could not be built (a missing compiler, Docker, the base image)."""


def compile_reference(dest: Path) -> str:
    """Compile :data:`CALCULATOR_C` into a dynamically linked, stripped ELF at ``dest``.

    Returns its sha256. Needs ``gcc`` and ``libc6-dev`` on the host (Debian, like the image).
    """
    gcc = shutil.which("gcc")
    if gcc is None:
        raise FixtureBuildError(
            "gcc not found: the fixture's reference binary is compiled on the host; "
            "install it with `apt-get install -y gcc libc6-dev`"
        )
    with tempfile.TemporaryDirectory(prefix="pb-fixture-cc-") as tmp:
        src = Path(tmp) / "calculator.c"
        src.write_text(CALCULATOR_C)
        out = Path(tmp) / "calculator"
        proc = subprocess.run(
            [gcc, *CFLAGS, "-o", str(out), str(src)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if proc.returncode != 0:
            raise FixtureBuildError(
                f"gcc failed ({proc.returncode}): {proc.stderr.strip()[-500:]}; "
                "the C library headers are in Debian's libc6-dev"
            )
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out, dest)
    return hashlib.sha256(dest.read_bytes()).hexdigest()


def fixture_image(instance_id: str) -> str:
    """The canonical image a fixture task's ``programbench eval`` runs (``<org>/<id>:<tag>``)."""
    return f"programbench/{instance_id.replace('__', '_1776_')}:{CLEANROOM_TAG}"


def ensure_fixture_image(reference_binary: bytes, also_for: tuple[str, ...] = (),
                         client: docker.DockerClient | None = None) -> tuple[str, str]:
    """Build (once) the fixture layer on the project base; tag it :data:`FIXTURE_IMAGE`, and
    :func:`fixture_image` of every task id in ``also_for`` (one image, one tag per task).

    Returns ``(tag, image_id)``; the content-hash tag stays too. One client (``client``,
    or the environment's) and, when the image and its tags are already there, one inspect:
    only a missing tag is (re)set.
    """
    from docker.utils import parse_repository_tag

    from harness.api import LayerRecipe, base_recipe, ensure_image, get_client

    recipe = LayerRecipe(
        name=LAYER_NAME,
        base=base_recipe(),
        dockerfile_body=DOCKERFILE_BODY,
        files={"README.md": README.encode(), "executable": reference_binary},
    )
    wanted = (FIXTURE_IMAGE, *(fixture_image(instance_id) for instance_id in also_for))
    engine = client or get_client()
    try:
        image_id, missing = _untagged(engine, recipe.tag, wanted)
        if image_id is None:
            image_id = ensure_image(recipe, client=engine).image_id
        for tag in missing:
            repo, name = parse_repository_tag(tag)
            engine.api.tag(image_id, repo, name or "latest", force=True)
    finally:
        if client is None:
            engine.close()
    return FIXTURE_IMAGE, image_id


def _untagged(
    client: docker.DockerClient, ref: str, tags: tuple[str, ...]
) -> tuple[str | None, tuple[str, ...]]:
    """(ID of the local image ``ref``, the ``tags`` not on it); (None, all) when absent."""
    from docker.errors import ImageNotFound

    try:
        info = client.api.inspect_image(ref)
    except ImageNotFound:
        return None, tags
    present = set(info.get("RepoTags") or ())
    return str(info["Id"]), tuple(tag for tag in tags if tag not in present)
