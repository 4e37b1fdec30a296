"""``harness cowork build-servers``: what the host side decides before any image is built."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.cowork_bench.qualify import not_built_note
from benchmarks.cowork_bench.servers_image import (
    checkout_date,
    is_packaged,
    relax_requires_python,
    servers_recipe,
)
from tests.support.suite import REPO_ROOT

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "cowork_mini"


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


@pytest.mark.parametrize(
    ("text", "packaged"),
    [('[project]\nname = "x"\n', False),
     ('[build-system]\nrequires = ["hatchling"]\n[project]\nname = "x"\n', True),
     ('[build-system]\nrequires = ["x"]\n[tool.uv]\npackage = false\n', False),
     ('[project]\nname = "x"\n[tool.uv]\npackage = true\n', True)],
)
def test_a_project_without_a_build_system_is_virtual_as_uv_sync_sees_it(
    tmp_path: Path, text: str, packaged: bool
) -> None:
    (tmp_path / "pyproject.toml").write_text(text)
    assert is_packaged(tmp_path / "pyproject.toml") is packaged


def test_an_unlocked_server_resolves_as_of_the_last_commit_that_changed_its_folder(
    tmp_path: Path,
) -> None:
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    for folder, when in (("old_server", "2026-07-12T15:51:45+03:00"),
                         ("new_server", "2026-08-08T12:00:00+00:00")):
        (tmp_path / "local_servers" / folder).mkdir(parents=True)
        (tmp_path / "local_servers" / folder / "pyproject.toml").write_text("[project]\n")
        env = {"GIT_COMMITTER_DATE": when, "GIT_AUTHOR_DATE": when, "PATH": os.environ["PATH"]}
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", folder], check=True, env=env)
    assert checkout_date(tmp_path, "local_servers/old_server") == "2026-07-12T15:51:45+03:00"
    assert checkout_date(tmp_path, "local_servers/new_server") == "2026-08-08T12:00:00Z"
    assert checkout_date(tmp_path) == "2026-08-08T12:00:00Z"
    assert checkout_date(tmp_path / "local_servers" / "nowhere") is None


def test_a_failing_server_is_told_apart_by_the_folder_its_command_names() -> None:
    records = {"filesystem": "npm ci: ENOTCACHED", "moex": "pip wheel: no package"}
    base = "/opt/local_servers"
    note = not_built_note(["node", f"{base}/filesystem/dist/index.js", "/workspace"], base,
                          records)  # fmt: skip
    assert note == "filesystem was not built into this image: npm ci: ENOTCACHED"
    assert not_built_note(["uv", "--directory", f"{base}/excel", "run", "x"], base,
                          records) is None  # fmt: skip
    assert not_built_note(["node", "/elsewhere/filesystem/index.js"], base, records) is None


def test_a_checkout_without_python_servers_records_each_server_it_copies() -> None:
    recipe, builds = servers_recipe(FIXTURE)
    assert [(b.name, b.kind, b.status) for b in builds] == [("mini_office", "other", "other")]
    assert "local_servers/mini_office/server.py" in recipe.files
    assert "ENV LOCAL_SERVERS_PATH=/opt/local_servers UV_NO_SYNC=1" in recipe.dockerfile_body


# --------------------------------------------------------------------------- Docker

SERVERS_FIXTURE = FIXTURE.parent / "cowork_servers"
NOTES_YAML = (
    "type: stdio\nname: notes\nparams:\n  command: uv\n  args:\n    - \"--directory\"\n"
    "    - \"${local_servers_paths}/notes_server\"\n    - \"run\"\n    - \"notes-server\"\n"
    "  cwd: \"${agent_workspace}\"\nclient_session_timeout_seconds: 60\n"
)
HELLO_YAML = (
    "type: stdio\nname: hello\nparams:\n  command: node\n  args:\n"
    "    - \"${local_servers_paths}/hello_node/build/index.js\"\n"
    "  cwd: \"${agent_workspace}\"\nclient_session_timeout_seconds: 60\n"
)
SCRIPT_YAML = (
    "type: stdio\nname: script\nparams:\n  command: uv\n  args:\n    - \"--directory\"\n"
    "    - \"${local_servers_paths}/script_server\"\n    - \"run\"\n    - \"server.py\"\n"
    "client_session_timeout_seconds: 60\n"
)
NOTES_TASK = "notes-keeper"
UNBUILT_TASK = "needs-an-unbuilt-server"


def servers_checkout(tmp: Path) -> Path:
    """``cowork_mini`` plus, in ``local_servers/``: the packaged Python server (asking for
    Python 3.12 in this copy), the Node server (a build script, no dependencies), the
    script-style virtual project, and a Python and a Node server whose dependency does not
    exist; yaml files for the first three and a task naming them."""
    root = tmp / "bench"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns(".ruff_cache", "__pycache__"))
    local = root / "local_servers"
    shutil.copytree(SERVERS_FIXTURE / "notes_server", local / "notes_server")
    pyproject = local / "notes_server" / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('">=3.11"', '">=3.12"'))
    (local / "missing_dep").mkdir()
    (local / "missing_dep" / "pyproject.toml").write_text(
        '[project]\nname = "missing-dep"\nversion = "0"\nrequires-python = ">=3.10"\n'
        'dependencies = ["harness-test-no-such-distribution-4f1c==1.0"]\n'
    )
    shutil.copytree(SERVERS_FIXTURE / "hello_node", local / "hello_node")
    shutil.copytree(SERVERS_FIXTURE / "script_server", local / "script_server")
    (local / "node_missing_dep").mkdir()
    (local / "node_missing_dep" / "package.json").write_text(
        '{"name": "node-missing-dep", "version": "1.0.0",'
        ' "dependencies": {"harness-test-no-such-package-4f1c": "^1.0.0"}}'
    )
    (root / "configs" / "mcp_servers" / "notes.yaml").write_text(NOTES_YAML)
    (root / "configs" / "mcp_servers" / "hello.yaml").write_text(HELLO_YAML)
    (root / "configs" / "mcp_servers" / "script.yaml").write_text(SCRIPT_YAML)
    task = root / "tasks" / "finalpool" / NOTES_TASK
    shutil.copytree(root / "tasks" / "finalpool" / "email-reply-invoice", task)
    config = json.loads((task / "task_config.json").read_text())
    config["needed_mcp_servers"] = ["notes", "hello", "script"]
    (task / "task_config.json").write_text(json.dumps(config))
    (root / "configs" / "mcp_servers" / "unbuilt.yaml").write_text(
        "type: stdio\nname: unbuilt\nparams:\n  command: node\n  args:\n"
        "    - \"${local_servers_paths}/node_missing_dep/build/index.js\"\n"
        "client_session_timeout_seconds: 20\n"
    )
    unbuilt = root / "tasks" / "finalpool" / UNBUILT_TASK
    shutil.copytree(task, unbuilt)
    (unbuilt / "task_config.json").write_text(json.dumps({**config,
                                                          "needed_mcp_servers": ["unbuilt"]}))
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "bench"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    return root


def harness_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True,
                          text=True, cwd=REPO_ROOT, timeout=900)  # fmt: skip


@pytest.mark.slow
@pytest.mark.docker
def test_build_servers_installs_packaged_python_and_node_servers_and_qualify_lists_tools(
    tmp_path: Path,
) -> None:
    root = servers_checkout(tmp_path)
    built = harness_cli("cowork", "build-servers", "--cowork-root", str(root))
    assert built.returncode == 0, built.stdout + built.stderr
    record = json.loads(built.stdout.strip().splitlines()[-1])
    tag = record["tag"]
    try:
        servers = {s["name"]: s for s in record["servers"]}
        assert servers["notes_server"]["status"] == "built"
        assert servers["notes_server"]["requires_python_adjusted"] == ">=3.12"
        assert servers["missing_dep"]["status"] == "not_built"
        assert "harness-test-no-such-distribution-4f1c" in servers["missing_dep"]["reason"]
        assert (servers["hello_node"]["status"], servers["hello_node"]["kind"]) == ("built", "node")
        assert servers["script_server"]["status"] == "built"  # its dependencies only
        assert servers["node_missing_dep"]["status"] == "not_built"
        assert "npm install" in servers["node_missing_dep"]["reason"]
        assert servers["mini_office"]["status"] == "other"
        # Upstream's file is untouched; only the image's copy was relaxed.
        assert '">=3.12"' in (root / "local_servers/notes_server/pyproject.toml").read_text()

        out = tmp_path / "qualify.json"
        proc = harness_cli("cowork", "qualify", "--cowork-root", str(root), "--cowork-image",
                           tag, "--task", NOTES_TASK, "--task", UNBUILT_TASK,
                           "--output", str(out))  # fmt: skip
        assert proc.returncode == 1, proc.stdout + proc.stderr  # one task refused
        assert f"ready    {NOTES_TASK}" in proc.stdout
        report, refused = json.loads(out.read_text())["tasks"]
        # The refusal names the image's build record, not only the missing file.
        why = refused["servers"]["unbuilt"]
        assert not refused["ready"] and why.startswith("failed: node_missing_dep was not built")
        assert "harness-test-no-such-package-4f1c" in why
        assert report["ready"] and set(report["tools"]["notes"]) == {"add_note", "list_notes"}
        assert set(report["tools"]["hello"]) == {"greet", "node_version"}
        assert set(report["tools"]["script"]) == {"echo"}
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)
