"""Upstream's own images without hand edits (issue 26 point 4).

Stand-ins, since no registry reaches Docker Hub here: ``tests/fixtures/cowork_upstream`` (a
Dockerfile in upstream's layout: root only, no ``agent`` user, ``/opt/venv``, ``uv`` in
root's ``~/.local/bin``, the checkout copied into ``/workspace``) on the harness's Debian base
without its agent user, and ``tests/fixtures/cowork_upstream_pg`` (Debian's
``postgresql-15`` behind an entrypoint with the official ``postgres`` image's contract). Both
bases are layer recipes (content-hash tagged, built once); the checkout image goes through
``harness cowork build-image`` untouched.

* one build for the module, by the run's path (a dry run with ``--cowork-build-image``): the
  checkout's Dockerfile as it is (the checkout stays clean), then the harness's layer (agent
  uid 1000, the supervisor, ``mcp-call``, ``/workspace`` emptied), tagged by both hashes;
  ``harness cowork build-image`` then finds both, not building them again (the CLI's own
  first build is ``test_cowork_image.py``'s);
* the official layout's sidecar: seeded by the image's own entrypoint, the foreign-key fix
  and the roles; a broken dump fails at once with the entrypoint's log;
* a run with ``--cowork-build-image --cowork-pg-image <official stand-in>``: a command agent solves
  a database task with ``mcp-call`` in the derived image, checked by the task's checker; the
  IDs are in the manifest and the row.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from benchmarks.cowork_bench.build_image import BASE_LABEL, DERIVED_REPO
from benchmarks.cowork_bench.containers import RunIdentity
from benchmarks.cowork_bench.images import (
    HARNESS_LAYER_SCRIPT,
    LAUNCHER,
    command_names,
    harness_layer_files,
    install_commands,
    supervisor_files,
)
from benchmarks.cowork_bench.resume_check import waiver_reasons
from benchmarks.cowork_bench.sidecar import AGENT_ROLE, _psql, layout_of, start_postgres
from harness.core.errors import InfraError
from harness.sandbox import create_internal_network
from harness.sandbox import labels as L
from harness.sandbox.cleanup import remove_labelled
from tests.benchmarks.cowork.cowork_helpers import FIXTURE
from tests.benchmarks.cowork.cowork_upstream_support import (
    PG_TAG,
    UPSTREAM,
    ensure_standins,
)
from tests.support.suite import REPO_ROOT, run_pytest

GCAL = "gcal-standup-week"
# The command agent: the calendar task through the task's MCP tools, from bash.
GCAL_BY_MCP_CALL = (
    "mcp-call --list google_calendar > tools.txt && "
    "for d in 03 04 05; do mcp-call google_calendar create_event "
    '"{\\"summary\\": \\"Daily standup\\", \\"start\\": \\"2026-03-${d}T09:30:00+00:00\\", '
    '\\"end\\": \\"2026-03-${d}T09:45:00+00:00\\"}" || exit 1; done'
)


def harness_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=1200, check=False)  # fmt: skip


def upstream_checkout(dest: Path) -> tuple[Path, str]:
    """``cowork_mini`` with the stand-in Dockerfile, committed."""
    shutil.copytree(FIXTURE, dest, ignore=shutil.ignore_patterns(".ruff_cache", "__pycache__"))
    for name in ("Dockerfile", ".dockerignore"):
        shutil.copy(UPSTREAM / name, dest / name)
    git = ["git", "-C", str(dest), "-c", "user.email=t@example.org", "-c", "user.name=t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "upstream stand-in"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    sha = subprocess.run([*git, "rev-parse", "--short=7", "HEAD"], check=True,
                         capture_output=True, text=True).stdout.strip()  # fmt: skip
    return dest, sha


def in_image(image: str, script: str, user: str = "0") -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", "run", "--rm", "--network", "none", "--user", user,
                           "--entrypoint", "sh", image, "-c", script],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


@pytest.fixture(scope="module")
def standins() -> tuple[str, str]:
    """(the stand-in base's ID, the stand-in postgres image's ID), tagged as the fixtures
    name them (built by ``scripts/setup.sh``; here only when missing)."""
    assert shutil.which("docker"), "these tests run the docker CLI: install it"
    return ensure_standins()


# --------------------------------------------------------------------------- no Docker


def test_layout_of_tells_the_official_contract_from_the_harness_image() -> None:
    official = {"Entrypoint": ["docker-entrypoint.sh"], "Env": ["PGDATA=/var/lib/postgresql/data"]}
    assert layout_of(official) == "official"
    assert layout_of({"Entrypoint": ["/usr/local/bin/docker-entrypoint.sh"],
                      "Env": ["PATH=/bin", "PGDATA=/d"]}) == "official"  # fmt: skip
    assert layout_of({"Entrypoint": None, "Env": ["PATH=/bin"]}) == "harness"
    assert layout_of({"Entrypoint": ["docker-entrypoint.sh"], "Env": []}) == "harness"
    assert layout_of({}) == "harness"


def test_the_layer_ships_every_supervisor_file_and_puts_commands_on_the_path() -> None:
    files = supervisor_files()
    assert "harness_mcp.py" in files and "mcp-call" in command_names(files)
    assert "install -m 0755 /opt/harness_mcp/mcp-call /usr/local/bin/mcp-call" in (
        install_commands(command_names(files)))  # fmt: skip
    assert install_commands([]) == ""
    layer = harness_layer_files("3.11")
    assert layer["harness_layer/supervisor/mcp-call"] == files["mcp-call"]
    assert layer["harness_layer/launcher.py"] == LAUNCHER.encode()
    wheels = [n for n in layer if n.startswith("harness_layer/wheels/")]
    assert any("/mcp-" in n for n in wheels) and not any("/uv-" in n for n in wheels)
    script = HARNESS_LAYER_SCRIPT
    assert "useradd --create-home --uid 1000" in script and "! -name .venv" in script


def test_the_missing_db_waiver_makes_a_run_not_reportable() -> None:
    assert waiver_reasons(False, False, False, dirty=False, commit_matches=True) == []
    reasons = waiver_reasons(False, False, False, dirty=False, commit_matches=True,
                             allow_missing_db=True)  # fmt: skip
    assert reasons == ["cowork waiver --cowork-allow-missing-db (the database may start without the "
                       "checkout's dump)"]  # fmt: skip


def test_a_missing_dump_fails_before_any_container(tmp_path: Path) -> None:
    ident = RunIdentity("cowork-nodump", tmp_path, "main")
    with pytest.raises(InfraError) as info:
        start_postgres("no-network", ident, "x", tmp_path / "db" / "init.sql.gz",
                       image_id="no-such-image")  # fmt: skip
    assert info.value.reason_code == "pg_fail"
    assert "no database dump at" in str(info.value) and "db/init.sql.gz" in str(info.value)


def test_build_image_and_cowork_image_together_are_refused(tmp_path: Path) -> None:
    run = run_pytest("benchmarks/cowork_bench", tmp_path / "run", "--cowork-root", str(FIXTURE),
                     "--cowork-build-image", "--cowork-image", "x:1", "--dry-run", timeout=120)  # fmt: skip
    assert run.rc == 2, run.out
    assert "--cowork-build-image and --cowork-image both choose the runtime image" in run.out


# --------------------------------------------------------------------------- Docker


@dataclasses.dataclass(frozen=True)
class Built:
    """The stand-in checkout and the dry run whose ``--cowork-build-image`` built its images."""

    checkout: Path
    sha: str
    derived_tag: str
    derived_id: str
    base_id: str


@pytest.fixture(scope="module")
def upstream_built(
    tmp_path_factory: pytest.TempPathFactory, standins: tuple[str, str]
) -> Iterator[Built]:
    """One build for the module, by the run's own path: a dry run with ``--cowork-build-image``
    (the controller builds the checkout's Dockerfile untouched, then the harness's layer, and
    records both). The CLI test then finds them; the run test runs in them. Their tags are
    removed after the module (the engine is shared)."""
    _, pg_id = standins
    tmp = tmp_path_factory.mktemp("upstream")
    checkout, sha = upstream_checkout(tmp / "bench")
    tags = [f"cowork-pack:{sha}"]
    try:
        dry = run_pytest("benchmarks/cowork_bench", tmp / "dry", *run_options(checkout),
                         "--dry-run", timeout=1200)  # fmt: skip
        assert dry.rc == 0, dry.out[-3000:]
        chosen = dry.manifest["extra"]["cowork"]["images"]
        derived_tag, derived_id = chosen["runtime"]["ref"], chosen["runtime"]["id"]
        tags.append(derived_tag)
        assert derived_tag.startswith(f"{DERIVED_REPO}:") and chosen["pg"]["id"] == pg_id
        assert dry.statuses() == {GCAL: "skipped"}
        base_id = docker.from_env().api.inspect_image(tags[0])["Id"]
        yield Built(checkout, sha, derived_tag, derived_id, base_id)
    finally:
        client = docker.from_env()
        for tag in reversed(tags):
            with contextlib.suppress(docker.errors.APIError):
                client.api.remove_image(tag, force=True)


def run_options(checkout: Path) -> list[str]:
    return ["--cowork-root", str(checkout), "--cowork-allow-bench-commit-mismatch", "--cowork-build-image",
            "--cowork-pg-image", PG_TAG, "--instance", GCAL]  # fmt: skip


@pytest.mark.slow
@pytest.mark.docker
def test_build_image_builds_upstream_untouched_then_the_harness_layer(
    upstream_built: Built,
) -> None:
    checkout, sha = upstream_built.checkout, upstream_built.sha
    res = harness_cli("cowork", "build-image", "--cowork-root", str(checkout))
    assert res.returncode == 0, res.stderr[-3000:]
    rec = json.loads(res.stdout.strip().splitlines()[-1])
    derived = rec["derived"]
    # what the run's --cowork-build-image built, found by both hashes and not built again
    assert (rec["image_id"], derived["tag"], derived["image_id"], derived["built"]) == (
        upstream_built.base_id,
        upstream_built.derived_tag,
        upstream_built.derived_id,
        False,
    )
    assert rec["tag"] == f"cowork-pack:{sha}" and not rec["dirty"]
    base_hex = rec["image_id"].split(":", 1)[1]
    assert derived["tag"].startswith(f"{DERIVED_REPO}:{base_hex[:12]}-")
    assert derived["base_image_id"] == rec["image_id"]
    assert derived["python"] == "3.11"
    assert f"found {derived['tag']}" in res.stderr
    assert f"run with --cowork-image {derived['tag']}" in res.stderr
    git = ["git", "-C", str(checkout), "status", "--porcelain"]
    assert subprocess.run(git, capture_output=True, text=True).stdout == ""  # no hand edit

    upstream = in_image(rec["tag"], "getent passwd 1000; ls /workspace/tasks/finalpool")
    assert "agent" not in upstream.stdout and GCAL in upstream.stdout  # as upstream builds it
    ours = in_image(derived["tag"], "id -u agent; ls -A /workspace | wc -l; "
                    "test -x /usr/local/bin/mcp-call && test -x /usr/local/bin/uv && echo ok")  # fmt: skip
    assert ours.stdout.split() == ["1000", "0", "ok"], ours.stdout + ours.stderr
    help_ = in_image(derived["tag"], "/opt/venv/bin/python3 /opt/harness_mcp/harness_mcp.py "
                     "--help && mcp-call --help", user="agent")  # fmt: skip
    assert help_.returncode == 0 and "serve" in help_.stdout, help_.stderr
    labels = docker.from_env().api.inspect_image(derived["tag"])["Config"]["Labels"]
    assert labels[BASE_LABEL] == rec["image_id"] and labels[L.RECIPE].startswith(DERIVED_REPO)


@pytest.mark.slow
@pytest.mark.docker
def test_official_layout_sidecar_is_seeded_by_its_own_entrypoint(
    tmp_path: Path, standins: tuple[str, str]
) -> None:
    _, pg_id = standins
    ident = RunIdentity(f"cowork-pgofficial-{os.getpid()}", tmp_path, "main")
    try:
        net = create_internal_network(ident.run_id, "pg", ident.worker, tmp_path)
        sidecar = start_postgres(net, ident, "pg", FIXTURE / "db" / "init.sql.gz", image_id=pg_id)
        assert (sidecar.layout, sidecar.image_id) == ("official", pg_id)
        sql = ("SELECT (SELECT count(*) FROM email.messages) > 0, "
               "(SELECT confdeltype FROM pg_constraint WHERE conname = 'sent_log_message_id_fkey'), "
               "(SELECT rolsuper FROM pg_roles WHERE rolname = 'eigent'), "
               f"(SELECT rolsuper FROM pg_roles WHERE rolname = '{AGENT_ROLE}')")  # fmt: skip
        res = _psql(sidecar.container, ["-At", "-c", sql], timeout_sec=60)
        assert res.stdout_text.strip() == "t|c|t|f", res.stderr_text
        sidecar.enter_agent_phase()  # eigent locked out, then back: the admin role works
        sidecar.leave_agent_phase()
        assert sidecar.timings["seed_s"] > 0

        empty = start_postgres(net, ident, "pg-empty", tmp_path / "db" / "init.sql.gz",
                               image_id=pg_id, allow_unseeded=True)  # fmt: skip
        assert empty.seed_missing == str(tmp_path / "db" / "init.sql.gz")
        res = _psql(empty.container, ["-At", "-c", "SELECT to_regclass('email.messages') IS NULL, "
                                      f"(SELECT count(*) FROM pg_roles WHERE rolname = '{AGENT_ROLE}')"],
                    timeout_sec=60)  # fmt: skip
        assert res.stdout_text.strip() == "t|1", res.stderr_text

        broken = tmp_path / "broken.sql.gz"
        subprocess.run(["sh", "-c", f"echo 'CREATE TABLE oops (;' | gzip > {broken}"], check=True)
        with pytest.raises(InfraError) as info:
            start_postgres(net, ident, "pg-broken", broken, image_id=pg_id)
        assert info.value.reason_code == "pg_fail"
        assert "docker-entrypoint.sh exited" in str(info.value)
        assert "syntax error" in str(info.value)
    finally:
        remove_labelled({L.RUN: ident.run_id})


@pytest.mark.slow
@pytest.mark.docker
def test_run_builds_the_image_and_uses_the_official_postgres(
    tmp_path: Path, standins: tuple[str, str], upstream_built: Built
) -> None:
    _, pg_id = standins
    run = run_pytest("benchmarks/cowork_bench", tmp_path / "run",
                     *run_options(upstream_built.checkout), "--agent", "command",
                     "--agent-command", GCAL_BY_MCP_CALL, "-n", "1", timeout=900)  # fmt: skip
    assert run.rc == 0, run.out[-3000:]
    row = run.latest[GCAL]
    assert (row["status"], row["resolved"]) == ("passed", True), row
    own = row["details"]["cowork_bench"]
    assert own["runtime_image"] == upstream_built.derived_id  # the admitted image
    assert own["pg_image"] == pg_id
    assert run.manifest["extra"]["cowork"]["images"]["runtime"]["ref"] == (
        upstream_built.derived_tag
    )
    tools = run.root / "cowork_bench" / GCAL / "workspace" / "tools.txt"
    assert "create_event" in tools.read_text()
