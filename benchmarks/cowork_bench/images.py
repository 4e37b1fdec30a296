"""Local images for Cowork Bench: ``harness.sandbox`` layer recipes on the shared base.

* ``pg15``: Debian's ``postgresql-15`` with a cluster initialised at build time (UTF-8, UTC,
  listening on all addresses, scram auth), superuser role ``eigent``/``camel`` and database
  ``cowork_gym`` owned by it. Durability is off (``fsync``, ``synchronous_commit``,
  ``full_page_writes``): every sidecar is a throwaway per-instance database, and seeding the
  real dump is faster.
* ``runtime``: python3 with openpyxl, psycopg2, python-docx and pypdf from Debian, plus the
  PostgreSQL client; the agent and the eval containers both use it (the task tree is copied
  in per container, so one image serves every task and checkout). Upstream's layout where
  the registries here allow: a venv at ``/opt/venv`` (``PYTHON_BIN``, seeing the Debian
  packages) holding the ``mcp`` SDK from PyPI (exact pins, :data:`MCP_REQUIREMENTS`; the
  wheels are downloaded on the host with pip once, into the cache, and built in offline),
  and ``uv`` (``UV_PYTHON_DOWNLOADS=never``, offline: the containers have no network), Node
  from Debian (``nodejs``), and the harness's MCP supervisor at ``/opt/harness_mcp``
  (:mod:`.mcp_servers`). Upstream's servers are not installed: their Node dependencies come
  from npm and their Python ones from a per-server ``uv sync``, neither of which this image
  does; ``harness cowork qualify`` names each such server with the reason.

Every file of ``mcp_image/`` goes to ``/opt/harness_mcp``: the supervisor (``*.py``) and the
commands for the agent (a name without a suffix, e.g. ``mcp-call``), also installed in
``/usr/local/bin``.

Tags are content hashes of the recipes (``harness.sandbox.images.build``): built once, reused.

The harness's layer on a checkout's own image (``harness cowork build-image``,
:mod:`.build_image`) is described here too (:func:`harness_layer_files`): the agent user (uid
1000), the checkout's baked-in copy removed from ``/workspace`` (its groundtruth and checkers
must not reach the agent container; the harness copies each container's own tree), ``uv``
and the servers under ``/opt/local_servers`` usable by the agent user, and the supervisor
run by upstream's ``/opt/venv/bin/python3`` through a launcher that puts the harness's own
pinned packages (``/opt/harness_mcp/site``, for that interpreter's version) first on its
``sys.path`` only, so upstream's environment is left as it is.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Literal

from harness.api import (
    AGENT_UID,
    AGENT_USER,
    BuiltImage,
    InfraError,
    LayerRecipe,
    base_recipe,
    cache_root,
)
from harness.api import ensure_image as sandbox_ensure_image

MCP_IMAGE_DIR = Path(__file__).parent / "mcp_image"
SUPERVISOR_DIR = "/opt/harness_mcp"
BIN_DIR = "/usr/local/bin"
VENV = "/opt/venv"
PYTHON_BIN = f"{VENV}/bin/python3"
SUPERVISOR = "/opt/harness_mcp/harness_mcp.py"
# Every wheel the venv gets, pinned (the image's content hash covers their bytes).
MCP_REQUIREMENTS: tuple[str, ...] = (
    "annotated_types==0.8.0", "anyio==4.16.0", "attrs==26.1.0", "certifi==2026.10.19.post1",
    "cffi==2.1.1", "click==8.5.1", "cryptography==50.0.2", "h11==0.16.0", "httpcore==1.0.9",
    "httpx==0.28.1", "httpx_sse==0.4.3", "idna==3.20", "jsonschema==4.26.0",
    "jsonschema_specifications==2025.9.1", "mcp==1.30.0", "pycparser==3.12",
    "pydantic==2.14.4", "pydantic_core==2.50.5", "pydantic_settings==2.16.3", "pyjwt==2.15.1",
    "python_dotenv==1.2.4", "python_multipart==0.0.34", "referencing==0.37.0",
    "rpds_py==2026.9.1", "sse_starlette==3.7.0", "starlette==1.10.0",
    "typing_extensions==4.16.0", "typing_inspection==0.4.5", "uvicorn==0.54.0",
    "uv==0.13.9",
)  # fmt: skip

PG_RECIPE = r"""
ENV TZ=UTC LANG=C.UTF-8 LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends postgresql-15 postgresql-client-15 \
 && rm -rf /var/lib/apt/lists/*
RUN set -eux; \
    pg_dropcluster 15 main || true; \
    pg_createcluster --locale C.UTF-8 --encoding UTF8 15 main -- --auth-local=peer --auth-host=scram-sha-256; \
    conf=/etc/postgresql/15/main; \
    printf "%s\n" "listen_addresses = '*'" "timezone = 'UTC'" "log_timezone = 'UTC'" \
      "fsync = off" "synchronous_commit = off" "full_page_writes = off" \
      "max_connections = 50" "shared_buffers = 64MB" >> $conf/postgresql.conf; \
    echo "host all all 0.0.0.0/0 scram-sha-256" >> $conf/pg_hba.conf; \
    pg_ctlcluster 15 main start; \
    runuser -u postgres -- psql -v ON_ERROR_STOP=1 -q \
      -c "CREATE ROLE eigent LOGIN SUPERUSER PASSWORD 'camel'" \
      -c "CREATE DATABASE cowork_gym OWNER eigent ENCODING 'UTF8' TEMPLATE template0"; \
    pg_ctlcluster 15 main stop
"""

RUNTIME_RECIPE = r"""
ENV TZ=UTC LANG=C.UTF-8 LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive PYTHONDONTWRITEBYTECODE=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3-openpyxl python3-psycopg2 \
      python3-docx python3-pypdf postgresql-client-15 \
 && rm -rf /var/lib/apt/lists/*
"""

VENV_RECIPE = rf"""
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3-venv nodejs \
 && rm -rf /var/lib/apt/lists/*
COPY wheels/ /tmp/wheels/
RUN python3 -m venv --system-site-packages {VENV} \
 && {VENV}/bin/pip install --no-index --no-cache-dir --find-links /tmp/wheels \
      $(ls /tmp/wheels | sed 's/-.*//') \
 && rm -rf /tmp/wheels && {PYTHON_BIN} -c "import mcp.server.fastmcp, uvicorn" \
 && ln -s {VENV}/bin/uv /usr/local/bin/uv && node --version
COPY harness_mcp/ /opt/harness_mcp/
RUN chmod -R a+rX /opt/harness_mcp
ENV PYTHON_BIN={PYTHON_BIN} LOCAL_SERVERS_PATH=/workspace/local_servers \
    UV_PYTHON_DOWNLOADS=never UV_PYTHON={PYTHON_BIN} UV_OFFLINE=1 UV_NO_CACHE=1
"""

ImageName = Literal["pg15", "runtime"]
PG_LAYER = LayerRecipe(name="harness/cowork-pg15", base=base_recipe(), dockerfile_body=PG_RECIPE)


def wheel_dir() -> Path:
    """The host cache of the pinned wheels (one folder per requirement set)."""
    key = hashlib.sha256("\n".join(MCP_REQUIREMENTS).encode()).hexdigest()[:16]
    return cache_root() / "wheels" / f"cowork-mcp-{key}"


def fetch_wheels() -> Path:
    """Download the pinned wheels (Linux x86_64, CPython 3.11) once, with pip."""
    dest = wheel_dir()
    if dest.is_dir():
        return dest
    tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", "3.11", "--implementation", "cp", "--platform",
           "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64", "-d", str(tmp),
           *MCP_REQUIREMENTS]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    if res.returncode != 0:
        raise InfraError(
            f"downloading the MCP SDK wheels failed (pip exit {res.returncode}): "
            f"{res.stderr.strip()[-300:]}; run scripts/setup.sh where PyPI is reachable",
            "image_build_failed",
        )
    try:
        tmp.rename(dest)
    except OSError:  # another process won the race
        if not dest.is_dir():
            raise
    return dest


def supervisor_files() -> dict[str, bytes]:
    """``mcp_image/``'s files by name (read now: the image's hash covers their bytes)."""
    return {p.name: p.read_bytes() for p in sorted(MCP_IMAGE_DIR.iterdir())
            if p.is_file() and not p.name.startswith(".") and p.suffix != ".pyc"}  # fmt: skip


def command_names(files: dict[str, bytes]) -> list[str]:
    """The files that are commands on the agent's ``PATH`` (no suffix, e.g. ``mcp-call``)."""
    return [name for name in files if "." not in name]


def install_commands(names: list[str]) -> str:
    """Dockerfile lines putting ``/opt/harness_mcp/<name>`` on the ``PATH`` (none: none)."""
    if not names:
        return ""
    steps = " && ".join(f"install -m 0755 {SUPERVISOR_DIR}/{n} {BIN_DIR}/{n}" for n in names)
    return f"RUN {steps}\n"


@lru_cache(maxsize=1)
def runtime_recipe() -> LayerRecipe:
    files = {f"wheels/{p.name}": p.read_bytes() for p in sorted(fetch_wheels().glob("*.whl"))}
    supervisor = supervisor_files()
    files.update({f"harness_mcp/{name}": data for name, data in supervisor.items()})
    return LayerRecipe(
        name="harness/cowork-runtime",
        base=base_recipe(),
        dockerfile_body=RUNTIME_RECIPE + VENV_RECIPE + install_commands(command_names(supervisor)),
        files=files,
    )


# --------------------------------------------------------------------- the harness's layer
SUPERVISOR_SITE = f"{SUPERVISOR_DIR}/site"  # the harness's packages (the supervisor's only)
SUPERVISOR_LIB = f"{SUPERVISOR_DIR}/lib"  # the real ``*.py`` files behind the launchers
IMAGE_PYTHON = "3.11"  # the runtime image's Python: the pinned wheels are for it

LAUNCHER = """\
# The harness's launcher (harness cowork build-image): runs lib/NAME with the harness's own
# packages first on sys.path, in this process only; upstream's environment is left as it is.
import os
import sys
import types

_here = os.path.dirname(os.path.realpath(__file__))
_real = os.path.join(_here, "lib", "NAME")
sys.path[:0] = [os.path.join(_here, "lib"), os.path.join(_here, "site")]
with open(_real, "rb") as _fh:
    _code = compile(_fh.read(), _real, "exec")
_main = types.ModuleType("__main__")
_main.__file__ = os.path.abspath(__file__)
sys.modules["__main__"] = _main
exec(_code, _main.__dict__)
"""

HARNESS_LAYER_SCRIPT = rf"""#!/bin/sh
# The harness's layer on a Cowork checkout's image (harness cowork build-image); as root.
set -eu
L=/tmp/harness_layer
say() {{ echo "harness layer: $*"; }}
if [ ! -x {PYTHON_BIN} ]; then
  echo "harness layer: no {PYTHON_BIN} in this image (upstream's layout has /opt/venv)" >&2
  exit 1
fi
# 1. The agent user, uid {AGENT_UID} (a base image's own uid-{AGENT_UID} user is renamed).
if id -u {AGENT_USER} >/dev/null 2>&1 && [ "$(id -u {AGENT_USER})" != {AGENT_UID} ]; then
  echo "harness layer: user {AGENT_USER} exists with uid $(id -u {AGENT_USER}), not {AGENT_UID}" >&2
  exit 1
fi
existing=$(getent passwd {AGENT_UID} | cut -d: -f1 || true)
if [ -z "$existing" ]; then
  if getent group {AGENT_UID} >/dev/null; then
    useradd --create-home --uid {AGENT_UID} --gid {AGENT_UID} --shell /bin/bash {AGENT_USER}
  else
    useradd --create-home --uid {AGENT_UID} --user-group --shell /bin/bash {AGENT_USER}
  fi
  say "added user {AGENT_USER} (uid {AGENT_UID})"
elif [ "$existing" != {AGENT_USER} ]; then
  usermod --login {AGENT_USER} --home /home/{AGENT_USER} --move-home "$existing"
  say "renamed user $existing (uid {AGENT_UID}) to {AGENT_USER}"
fi
# 2. The checkout baked into /workspace holds every task's groundtruth and checker: gone (the
#    harness copies each container's own tree); the prepared .venv stays.
mkdir -p /workspace
find /workspace -mindepth 1 -maxdepth 1 ! -name .venv -exec rm -rf {{}} +
# 3. What upstream runs as root, usable by the agent user: uv (and the Pythons it manages
#    under /root), Playwright's browsers, the servers (some write beside their code), their
#    bytecode compiled.
for tool in uv uvx; do
  if [ -x /root/.local/bin/$tool ] && [ ! -e {BIN_DIR}/$tool ]; then
    cp /root/.local/bin/$tool {BIN_DIR}/$tool
  fi
done
chmod o+x /root
if [ -d /root/.cache/ms-playwright ]; then  # upstream's browsers, where root's tools look
  chmod o+x /root/.cache
  install -d -o {AGENT_UID} -g {AGENT_UID} /home/{AGENT_USER}/.cache
  ln -sfn /root/.cache/ms-playwright /home/{AGENT_USER}/.cache/ms-playwright
fi
if [ -d /opt/local_servers ]; then
  find /opt/local_servers \( -name node_modules -o -name .venv \) -prune \
    -o -exec chown {AGENT_UID}:{AGENT_UID} {{}} +
  find /opt/local_servers \( -name node_modules -o -name .venv \) -type d -prune \
    -exec chown {AGENT_UID}:{AGENT_UID} {{}} +
  for venv in /opt/local_servers/*/.venv; do
    [ -x "$venv/bin/python" ] && "$venv/bin/python" -m compileall -q "$venv/lib" \
      >/dev/null 2>&1 || true
  done
fi
# 4. The supervisor: the real files in lib/, launchers beside them, the packages in site/.
mkdir -p {SUPERVISOR_LIB} {SUPERVISOR_SITE}
{PYTHON_BIN} -c 'import glob, sys, zipfile
for wheel in sorted(glob.glob(sys.argv[2] + "/*.whl")):
    zipfile.ZipFile(wheel).extractall(sys.argv[1])' {SUPERVISOR_SITE} $L/wheels
for f in $L/supervisor/*; do
  name=$(basename "$f")
  case "$name" in
    *.py) cp "$f" {SUPERVISOR_LIB}/"$name"
          sed "s/NAME/$name/" $L/launcher.py > {SUPERVISOR_DIR}/"$name" ;;
    *.*)  cp "$f" {SUPERVISOR_DIR}/"$name" ;;
    *)    cp "$f" {SUPERVISOR_DIR}/"$name"; install -m 0755 "$f" {BIN_DIR}/"$name" ;;
  esac
done
chmod -R a+rX {SUPERVISOR_DIR}
# 5. Proof: the agent user runs the supervisor with the harness's packages.
runuser -u {AGENT_USER} -- {PYTHON_BIN} {SUPERVISOR} --help >/dev/null
test -f {SUPERVISOR_SITE}/mcp/__init__.py
say "agent {AGENT_UID}, supervisor $({PYTHON_BIN} -V 2>&1), $(ls {SUPERVISOR_SITE} | wc -l) entries"
"""

HARNESS_LAYER_BODY = """USER root
COPY harness_layer/ /tmp/harness_layer/
RUN sh /tmp/harness_layer/install.sh && rm -rf /tmp/harness_layer
"""


def supervisor_wheels(python: str) -> list[Path]:
    """The supervisor's wheels for CPython ``python`` (``3.10``): the runtime image's pinned
    set for its own Python, else the pinned ``mcp`` resolved for that version (cached)."""
    if python == IMAGE_PYTHON:
        return [p for p in sorted(fetch_wheels().glob("*.whl")) if not p.name.startswith("uv-")]
    mcp_pin = next(r for r in MCP_REQUIREMENTS if r.startswith("mcp=="))
    key = hashlib.sha256(f"{mcp_pin} {python}".encode()).hexdigest()[:16]
    dest = cache_root() / "wheels" / f"cowork-supervisor-py{python}-{key}"
    if not dest.is_dir():
        tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:",
               "--python-version", python, "--implementation", "cp", "--platform",
               "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64", "-d", str(tmp),
               mcp_pin]  # fmt: skip
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        if res.returncode != 0:
            raise InfraError(
                f"downloading {mcp_pin} for Python {python} failed (pip exit "
                f"{res.returncode}): {res.stderr.strip()[-300:]}", "image_build_failed")  # fmt: skip
        try:
            tmp.rename(dest)
        except OSError:  # another process won the race
            if not dest.is_dir():
                raise
    return sorted(dest.glob("*.whl"))


def harness_layer_files(python: str) -> dict[str, bytes]:
    """The build context of the harness's layer (``harness_layer/...``), for an image whose
    ``/opt/venv/bin/python3`` is CPython ``python``."""
    files = {"harness_layer/install.sh": HARNESS_LAYER_SCRIPT.encode(),
             "harness_layer/launcher.py": LAUNCHER.encode()}  # fmt: skip
    files.update({f"harness_layer/supervisor/{n}": d for n, d in supervisor_files().items()})
    files.update({f"harness_layer/wheels/{p.name}": p.read_bytes()
                  for p in supervisor_wheels(python)})  # fmt: skip
    return files


def ensure_image(name: ImageName) -> BuiltImage:
    """Build the recipe unless its content-hash tag exists (safe across processes)."""
    return sandbox_ensure_image(PG_LAYER if name == "pg15" else runtime_recipe())
