"""The Cowork upstream stand-ins: images in upstream's layout, built here from local packages
and wheels since no registry reaches Docker Hub (layer recipes, content-hash tagged, built
once; ``scripts/setup.sh`` builds them through :mod:`tests.support.images`).

* ``cowork-upstream-standin/ubuntu:22.04``: the ``FROM`` of ``tests/fixtures/cowork_upstream``'s
  Dockerfile (the harness's Debian base without its agent user, plus upstream's first steps);
* ``cowork-upstream-standin/postgres:15``: Debian's ``postgresql-15`` behind an entrypoint
  with the official ``postgres`` image's contract (``tests/fixtures/cowork_upstream_pg``).
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.cowork_bench.images import fetch_wheels
from harness.sandbox import LayerRecipe, base_recipe, ensure_image

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
UPSTREAM = FIXTURES / "cowork_upstream"
UPSTREAM_PG = FIXTURES / "cowork_upstream_pg"
BASE_TAG = "cowork-upstream-standin/ubuntu:22.04"  # the stand-in Dockerfile's FROM
PG_TAG = "cowork-upstream-standin/postgres:15"
STANDIN = FIXTURES / "cowork_upstream_base"  # the stand-in bases' Dockerfile bodies

def after_from(dockerfile: str) -> str:
    """A Dockerfile's lines after its ``FROM`` (a layer recipe's body)."""
    lines = dockerfile.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("FROM "))
    return "\n".join(lines[first + 1 :]) + "\n"


def standin_base() -> LayerRecipe:
    """The harness's Debian base without its agent user (upstream's ubuntu has none)."""
    return LayerRecipe(name="cowork-upstream-standin/base", base=base_recipe(),
                       dockerfile_body=(STANDIN / "no_agent.dockerfile").read_text())  # fmt: skip


def standin_ubuntu() -> LayerRecipe:
    """The checkout Dockerfile's ``FROM``: the base plus upstream's first steps (``apt-get``,
    ``uv`` in root's ``~/.local/bin``, ``/opt/venv`` with the ``mcp`` SDK), built once by
    content hash, so the Dockerfile's own steps stay quick."""
    wheels = {f"wheels/{p.name}": p.read_bytes() for p in sorted(fetch_wheels().glob("*.whl"))}
    return LayerRecipe(name="cowork-upstream-standin/ubuntu", base=standin_base(),
                       dockerfile_body=(STANDIN / "first_steps.dockerfile").read_text(),
                       files=wheels)  # fmt: skip


def standin_pg() -> LayerRecipe:
    return LayerRecipe(
        name="cowork-upstream-standin/postgres",
        base=standin_base(),
        dockerfile_body=after_from((UPSTREAM_PG / "Dockerfile").read_text()),
        files={"docker-entrypoint.sh": (UPSTREAM_PG / "docker-entrypoint.sh").read_bytes()},
    )


def ensure_standins() -> tuple[str, str]:
    """(the stand-in base's ID, the stand-in postgres image's ID), built if missing and tagged
    as the fixtures name them."""
    base = ensure_image(standin_ubuntu(), retag=BASE_TAG)
    pg = ensure_image(standin_pg(), retag=PG_TAG)
    return base.image_id, pg.image_id
