"""``harness cowork build-servers``: what the host side decides before any image is built."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.cowork_bench.servers_image import relax_requires_python, servers_recipe

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "cowork_mini"


@pytest.mark.parametrize(
    ("spec", "adjusted"),
    [(">=3.12", ">=3.12"), (">=3.10,<3.11", ">=3.10,<3.11"), (">=3.10", None),
     (">=3.11", None), (">=3.10,<3.13", None)],
)
def test_requires_python_is_relaxed_only_in_our_copy_and_only_when_it_excludes_3_11(
    tmp_path: Path, spec: str, adjusted: str | None
) -> None:
    pyproject = tmp_path / "pyproject.toml"
    before = f'[project]\nname = "x"\nrequires-python = "{spec}"\n'
    pyproject.write_text(before)
    assert relax_requires_python(pyproject) == adjusted
    after = '[project]\nname = "x"\nrequires-python = ">=3.11"\n'
    assert pyproject.read_text() == (after if adjusted else before)


def test_a_checkout_without_python_servers_records_each_server_it_copies() -> None:
    recipe, builds = servers_recipe(FIXTURE)
    assert [(b.name, b.kind, b.status) for b in builds] == [("mini_office", "other", "other")]
    assert "local_servers/mini_office/server.py" in recipe.files
    assert "ENV LOCAL_SERVERS_PATH=/opt/local_servers UV_NO_SYNC=1" in recipe.dockerfile_body
