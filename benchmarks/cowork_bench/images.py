"""Local images for Cowork Bench: ``harness.sandbox`` layer recipes on the shared base.

* ``pg15``: Debian's ``postgresql-15`` with a cluster initialised at build time (UTF-8, UTC,
  listening on all addresses, scram auth), superuser role ``eigent``/``camel`` and database
  ``cowork_gym`` owned by it. Durability is off (``fsync``, ``synchronous_commit``,
  ``full_page_writes``): every sidecar is a throwaway per-instance database, and seeding the
  real dump is faster.
* ``runtime``: python3 with openpyxl, psycopg2, python-docx and pypdf from Debian, plus the
  PostgreSQL client; the agent and the eval containers both use it (the task tree is copied
  in per container, so one image serves every task and checkout).

Tags are content hashes of the recipes (``harness.sandbox.images``): built once, reused.
"""

from __future__ import annotations

from typing import Literal

from harness.sandbox import BuiltImage, LayerRecipe, base_recipe
from harness.sandbox import ensure_image as sandbox_ensure_image

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

ImageName = Literal["pg15", "runtime"]
RECIPES: dict[str, LayerRecipe] = {
    "pg15": LayerRecipe(name="harness/cowork-pg15", base=base_recipe(), dockerfile_body=PG_RECIPE),
    "runtime": LayerRecipe(
        name="harness/cowork-runtime", base=base_recipe(), dockerfile_body=RUNTIME_RECIPE
    ),
}


def ensure_image(name: ImageName) -> BuiltImage:
    """Build the recipe unless its content-hash tag exists (safe across processes)."""
    return sandbox_ensure_image(RECIPES[name])
