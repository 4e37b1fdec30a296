"""Local images for Cowork Bench, built from Debian packages on the shared base image.

* ``pg15``: Debian's ``postgresql-15`` with a cluster initialised at build time (UTF-8, UTC,
  listening on all addresses, scram auth), superuser role ``eigent``/``camel`` and database
  ``cowork_gym`` owned by it. Durability is off (``fsync``, ``synchronous_commit``,
  ``full_page_writes``): every sidecar is a throwaway per-instance database, and seeding the
  real dump is several times faster.
* ``runtime``: python3 with openpyxl, psycopg2, python-docx and pypdf from Debian, plus the
  PostgreSQL client; the agent and the eval containers both use it (the task tree is copied
  in per container, so one image serves every task and checkout).

Tags are content hashes of (base image id, recipe text), so a rebuild happens only when either
changes; a file lock makes concurrent workers build once. Until ``harness.sandbox.images``
lands, the base is ``harness-test/base:probe`` (override: ``HARNESS_COWORK_BASE_IMAGE``).
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from docker.errors import APIError, BuildError, DockerException, ImageNotFound
from filelock import FileLock

from benchmarks.cowork_bench.docker_ops import client
from harness.errors import InfraError

DEFAULT_BASE = "harness-test/base:probe"
IMAGE_REPO = "harness-cowork"

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

RECIPES = {"pg15": PG_RECIPE, "runtime": RUNTIME_RECIPE}


@dataclass(frozen=True)
class BuiltImage:
    tag: str
    image_id: str
    built: bool  # False when the tag already existed
    seconds: float


def base_image() -> str:
    return os.environ.get("HARNESS_COWORK_BASE_IMAGE", DEFAULT_BASE)


def _image_id(ref: str) -> str | None:
    try:
        return str(client().images.get(ref).id)
    except ImageNotFound:
        return None


def recipe_tag(name: str, base: str | None = None) -> tuple[str, str]:
    """(tag, dockerfile) of a recipe on the base; the tag hashes base id and recipe text."""
    base = base or base_image()
    base_id = _image_id(base)
    if base_id is None:
        raise InfraError(
            f"base image {base} is missing; build it first (harness.sandbox base recipe)",
            reason_code="image_missing",
        )
    dockerfile = f"FROM {base_id}\n{RECIPES[name].strip()}\n"
    digest = hashlib.sha256(f"{base_id}\n{dockerfile}".encode()).hexdigest()[:16]
    return f"{IMAGE_REPO}/{name}:{digest}", dockerfile


def ensure_image(name: str, base: str | None = None) -> BuiltImage:
    """Build the recipe unless its content-hash tag exists; safe across processes."""
    tag, dockerfile = recipe_tag(name, base)
    started = time.monotonic()
    existing = _image_id(tag)
    if existing:
        return BuiltImage(tag, existing, False, 0.0)
    lock = Path(tempfile.gettempdir()) / f"harness-cowork-{tag.replace('/', '_')}.lock"
    with FileLock(str(lock), timeout=3600):
        existing = _image_id(tag)
        if existing:
            return BuiltImage(tag, existing, False, time.monotonic() - started)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            data = dockerfile.encode()
            info = tarfile.TarInfo("Dockerfile")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        buf.seek(0)
        try:
            image, _logs = client().images.build(
                fileobj=buf,
                custom_context=True,
                tag=tag,
                rm=True,
                forcerm=True,
                pull=False,
                labels={"harness.cowork.recipe": name},
            )
        except (BuildError, APIError, DockerException) as exc:
            raise InfraError(f"building {tag}: {exc}", reason_code="image_build_failed") from exc
        return BuiltImage(tag, str(image.id), True, time.monotonic() - started)
