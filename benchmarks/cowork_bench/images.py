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

Tags are content hashes of the recipes (``harness.sandbox.images.build``): built once, reused.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Literal

from harness.core.cache import cache_root
from harness.core.errors import InfraError
from harness.sandbox import BuiltImage, LayerRecipe, base_recipe
from harness.sandbox import ensure_image as sandbox_ensure_image

MCP_IMAGE_DIR = Path(__file__).parent / "mcp_image"
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


@lru_cache(maxsize=1)
def runtime_recipe() -> LayerRecipe:
    files = {f"wheels/{p.name}": p.read_bytes() for p in sorted(fetch_wheels().glob("*.whl"))}
    files["harness_mcp/harness_mcp.py"] = (MCP_IMAGE_DIR / "harness_mcp.py").read_bytes()
    return LayerRecipe(
        name="harness/cowork-runtime",
        base=base_recipe(),
        dockerfile_body=RUNTIME_RECIPE + VENV_RECIPE,
        files=files,
    )


def ensure_image(name: ImageName) -> BuiltImage:
    """Build the recipe unless its content-hash tag exists (safe across processes)."""
    return sandbox_ensure_image(PG_LAYER if name == "pg15" else runtime_recipe())
