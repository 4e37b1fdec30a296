"""Review wave 4: attacks on three recent paths.

1. The carried rows of a resume (``LedgerWriter.append_batch(new_folders=True)``/``settle``
   and the helper process of :mod:`harness.run.folder_copies`).
2. The gateway agent's task body (:func:`harness.agents.gateway.body.task_for`,
   :func:`~harness.agents.gateway.body.host_workspace`, ``agent_user``).
3. ``harness.api``'s lazy names (:mod:`harness.core.lazy`).

Each asserts a defence that holds. Four were real problems when the review found them, mended
since: a row holding U+2028, U+2029 or U+0085 broke the ledger where ``str.splitlines``
split it; ids and benchmark names took a final newline; a link planted in the run root was
followed by the carried copies; ``harness.sandbox`` loaded four names from modules that
only re-export them.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from harness.core.layout import LEDGER_NAME
from harness.core.models import TaskRow
from harness.run.folder_copies import FolderCopies
from harness.run.ledger import LedgerError, LedgerWriter, ledger_path, read_ledger
from tests.support.stand_ins import answers_id

# -- helpers ----------------------------------------------------------------------------


def row(instance_id: str = "t1", benchmark: str = "bench", **kw: object) -> TaskRow:
    return TaskRow(ts_unix=1.0, run_id="r", benchmark=benchmark, instance_id=instance_id,
                   status="passed", outcome="scored", **kw)  # type: ignore[arg-type]


def tree(top: Path) -> set[str]:
    """Every path under ``top`` (links not followed), relative."""
    out: set[str] = set()
    for base, dirs, files in os.walk(top):
        for name in dirs + files:
            out.add(os.path.relpath(os.path.join(base, name), top))
    return out


# == 1. carried rows and their folder copies ============================================

# Characters str.splitlines() splits on that JSON (pydantic's model_dump_json) leaves raw.
LINE_BREAKERS = ["\u2028", "\u2029", "\x85"]


@pytest.mark.parametrize("char", LINE_BREAKERS, ids=["u2028", "u2029", "u0085"])
def test_a_row_holding_a_unicode_line_break_reads_back(tmp_path: Path, char: str) -> None:
    writer = LedgerWriter(tmp_path)
    writer.append_batch([row("t1", error=f"the submission made eval fail: a{char}b"),
                         row("t2")], new_folders=True)
    assert writer.settle()
    # the writer's own guard holds: no '\n' in the line, one line per row as it sees it
    assert ledger_path(tmp_path).read_bytes().count(b"\n") == 2
    read = read_ledger(ledger_path(tmp_path))
    assert [r.instance_id for r in read.rows] == ["t1", "t2"]


def test_a_resume_reads_an_ancestor_whose_row_holds_u2028(tmp_path: Path) -> None:
    from harness.run.manifest import new_manifest, write_manifest
    from harness.run.resume import walk_ancestry

    root = tmp_path / "run1"
    root.mkdir()
    write_manifest(new_manifest(run_id="run1", run_root=root, argv=[], dry_run=False,
                                workers=1), root)
    writer = LedgerWriter(root)
    writer.append(row("t1", error="agent output: \u2028"))
    writer.append(row("t2"))
    ancestry = walk_ancestry(root)
    assert set(ancestry.rows[0]) == {"bench/t1", "bench/t2"}


@pytest.mark.parametrize("field,value", [
    ("instance_id", "t1\n"), ("instance_id", "t1@1\n"),
    ("benchmark", "bench\n"), ("benchmark", "..\n"),
])
def test_an_id_with_a_trailing_newline_is_refused(field: str, value: str) -> None:
    with pytest.raises(ValidationError):
        row(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("field,value", [
    ("benchmark", ".."), ("benchmark", "."), ("benchmark", "../x"), ("benchmark", "/tmp"),
    ("benchmark", ""), ("instance_id", ".."), ("instance_id", "../../x"),
    ("instance_id", "/etc"), ("instance_id", "a/b"), ("instance_id", "..@1"),
    ("instance_id", "x@0"), ("instance_id", "x\x00y"),
])
def test_a_tampered_ancestor_row_cannot_name_a_folder_outside(
    tmp_path: Path, field: str, value: str,
) -> None:
    """An ancestor's ledger line that names a path is not a row: the resume stops on it
    (a corrupt line), before anything is written."""
    good = json.loads(row("ok").dump_line())
    bad = {**good, field: value}
    ledger = tmp_path / LEDGER_NAME
    ledger.write_text(json.dumps(bad) + "\n" + json.dumps(good) + "\n")
    with pytest.raises(LedgerError):
        read_ledger(ledger)
    with pytest.raises(ValidationError):
        TaskRow.model_validate(bad)


def test_a_large_carried_batch_stays_in_the_run_root(tmp_path: Path) -> None:
    """Thousands of carried rows: each folder's copy holds its one line, under the run root;
    nothing beside it."""
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "beside").mkdir()
    before = tree(tmp_path)
    rows = [row(f"t{i}", error="x" * 200) for i in range(3000)]
    writer = LedgerWriter(root)
    assert writer.append_batch(rows, new_folders=True)
    assert writer.settle()
    after = tree(tmp_path)
    assert {p for p in after - before if not p.startswith("root")} == set()
    for r in rows[::97]:
        copy = root / "bench" / r.instance_id / LEDGER_NAME
        assert copy.read_text() == r.dump_line() + "\n"
    assert len(read_ledger(ledger_path(root)).rows) == 3000


def _entries(n: int) -> list[tuple[str, str, str]]:
    return [("bench", f"t{i}", row(f"t{i}").dump_line()) for i in range(n)]


def _copy(root: Path, entry: tuple[str, str, str]) -> Path:
    return root / entry[0] / entry[1] / LEDGER_NAME


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "fake_helper.py"
    path.write_text(textwrap.dedent(body))
    return path


@pytest.mark.parametrize("how", ["cannot_start", "dies_at_once", "dies_half_way",
                                 "garbage_report"])
def test_a_helper_that_fails_leaves_every_copy_written_once(tmp_path: Path, how: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    entries = _entries(50)
    helper = Path(sys.modules[FolderCopies.__module__].__file__ or "")
    scripts = {
        "dies_at_once": "import os; os._exit(9)\n",
        "dies_half_way": f"""
            import json, os, sys
            sys.path.insert(0, {str(helper.parent)!r})
            from folder_copies import write_here
            batch = json.loads(sys.stdin.buffer.read())
            entries = [tuple(e) for e in batch["entries"]]
            write_here(batch["root"], batch["name"], entries, range(len(entries) // 2))
            os._exit(137)  # as if SIGKILLed half way
        """,
        "garbage_report": """
            import sys; sys.stdin.buffer.read(); sys.stdout.write("[[0, ")
        """,
    }

    def spawn(argv: list[str], **kw: object) -> subprocess.Popen[bytes]:
        if how == "cannot_start":
            raise FileNotFoundError("no interpreter")
        return subprocess.Popen([argv[0], str(_script(tmp_path, scripts[how]))],
                                **kw)  # type: ignore[call-overload]

    copies = FolderCopies(str(root), LEDGER_NAME, entries, spawn=spawn)
    assert copies.wait() == []
    for entry in entries:
        assert _copy(root, entry).read_text() == entry[2] + "\n"


def test_the_helper_ignores_the_working_folder_and_pythonpath(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``python -I -S``: a ``json.py`` in the working folder or on PYTHONPATH is not run."""
    evil = tmp_path / "evil"
    evil.mkdir()
    marker = tmp_path / "ran"
    for name in ("json.py", "signal.py", "sitecustomize.py"):
        (evil / name).write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    monkeypatch.chdir(evil)
    monkeypatch.setenv("PYTHONPATH", str(evil))
    monkeypatch.setenv("PYTHONSTARTUP", str(evil / "json.py"))
    root = tmp_path / "root"
    root.mkdir()
    entries = _entries(3)
    copies = FolderCopies(str(root), LEDGER_NAME, entries)
    assert copies.proc is not None  # the helper ran, not the in-process fallback
    assert copies.wait() == []
    assert not marker.exists()
    assert all(_copy(root, e).is_file() for e in entries)


def test_a_symlink_planted_in_the_run_root_is_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "bench").symlink_to(outside)
    writer = LedgerWriter(root)
    writer.append_batch([row("t1")], new_folders=True)
    writer.settle()
    assert tree(outside) == set(), tree(outside)


# == 2. the gateway agent's task body ====================================================


def _sandbox(*, user: str = "root", workdir: str | None = "/workspace",
             binds: tuple[tuple[str, str], ...] = ()) -> SimpleNamespace:
    spec = SimpleNamespace(workdir=workdir, network="none", binds=binds, user=user)
    return SimpleNamespace(name="sbx-1", id="c1", spec=spec, user=user, exec=answers_id())


def _request(sandbox: object, **terms: object) -> Any:
    from harness.agents.base import AgentRequest, AgentTerms

    return AgentRequest(instance_id="t1", instance_dir=Path("/nonexistent"),
                        instruction="do it", sandbox=sandbox,  # type: ignore[arg-type]
                        adapter="bench", terms=AgentTerms(**terms))  # type: ignore[arg-type]


@pytest.mark.parametrize("user", ["root", "0", "00", "+0", "-0", "0:0", " root ", "root:agent",
                                  "", "\t0\n", "\uff10"])
def test_the_body_never_runs_the_executor_as_root(user: str) -> None:
    from harness.agents.gateway.agent import GatewayAgent

    body = GatewayAgent._body(_request(_sandbox(user=user)))
    assert body.executor_ref is not None and body.executor_ref.user == "agent"


def test_a_body_naming_root_is_refused_whoever_builds_it() -> None:
    from harness.agents.gateway.agent import GatewayAgent
    from harness.agents.gateway.errors import GatewayValidation

    request = _request(_sandbox())
    given = {"description": "x", "executor_ref": {"type": "docker_exec",
                                                  "container_name": "sbx-1", "user": "00:0"}}
    with pytest.raises(GatewayValidation):
        GatewayAgent._body(replace(request, task_body=given))


@pytest.mark.parametrize("workspace", ["/", "//", None])
def test_a_root_workspace_is_not_named(workspace: str | None) -> None:
    from harness.agents.gateway.body import task_for

    sandbox = _sandbox(workdir=None, binds=(("/", "/"),))
    body = task_for(_request(sandbox, workspace=workspace), "t-1")
    ref = body.executor_ref
    assert ref is not None and ref.workspace_backend_path is None
    # a bind onto '/' (no engine makes one) would still name its host folder: the only
    # way to get a host path here is a bind the harness itself asked for
    assert body.workspace_root in (None, "/")


@pytest.mark.parametrize("workspace", ["/workspace/../etc", "workspace", "/a/./../b"])
def test_a_workspace_that_climbs_is_refused(workspace: str) -> None:
    from harness.agents.gateway.body import task_for
    from harness.agents.gateway.errors import GatewayValidation

    with pytest.raises(GatewayValidation):
        task_for(_request(_sandbox(), workspace=workspace), "t-1")


@pytest.mark.parametrize("key", ["executor_ref", "project_id", "parent_task_id", "lineage"])
def test_the_terms_metadata_cannot_set_a_reserved_key(key: str) -> None:
    from harness.agents.gateway.body import task_for
    from harness.agents.gateway.errors import GatewayValidation

    with pytest.raises(GatewayValidation):
        task_for(_request(_sandbox(), metadata={key: {"type": "local"}}), "t-1")


def test_only_a_bind_on_the_workspace_names_a_host_folder() -> None:
    from harness.agents.gateway.body import host_workspace
    from harness.sandbox.reattach import bind_mounts

    info = {"Mounts": [
        {"Type": "volume", "Source": "/var/lib/docker/volumes/v/_data",
         "Destination": "/workspace"},
        {"Type": "bind", "Source": "/host/other", "Destination": "/workspace/sub"},
        {"Type": "tmpfs", "Source": "", "Destination": "/workspace"},
    ]}
    assert bind_mounts(info) == (("/host/other", "/workspace/sub"),)
    assert host_workspace(_sandbox(binds=bind_mounts(info)),  # type: ignore[arg-type]
                          "/workspace") is None
    assert host_workspace(_sandbox(binds=(("/h", "/workspace/"),)),  # type: ignore[arg-type]
                          "/workspace") == "/h"


@pytest.mark.docker
def test_root_inside_the_sandbox_cannot_change_the_host_workspace(tmp_path: Path) -> None:
    """An adopted sandbox's host folder comes from the engine's ``docker inspect``
    (:func:`harness.sandbox.reattach.bind_mounts`): even root in the container cannot add a
    mount there (no CAP_SYS_ADMIN), and its own mount namespace is not what the engine
    reports."""
    import docker

    from harness.agents.gateway.body import host_workspace
    from harness.sandbox.reattach import bind_mounts

    client = docker.from_env()
    tags = [t for img in client.images.list(name="harness/base") for t in img.tags]
    assert tags, "no harness/base image: run ./scripts/setup.sh --tests"
    folder = tmp_path / "ws"
    folder.mkdir()
    box = client.containers.run(tags[0], ["sleep", "120"], detach=True, user="0",
                                volumes={str(folder): {"bind": "/workspace", "mode": "rw"}},
                                network_mode="none")
    try:
        tries = box.exec_run(["sh", "-c", "mount --bind /etc /workspace; echo rc=$?; "
                                          "mkdir -p /w2 && mount -t tmpfs x /w2; echo rc=$?"])
        assert b"rc=0" not in tries.output, tries.output
        sandbox = _sandbox(binds=bind_mounts(client.api.inspect_container(box.id)))
        assert host_workspace(sandbox, "/workspace") == str(folder)  # type: ignore[arg-type]
        assert host_workspace(sandbox, "/w2") is None  # type: ignore[arg-type]
        assert host_workspace(sandbox, "/") is None  # type: ignore[arg-type]
    finally:
        box.remove(force=True)


# == 3. harness.api's lazy names =========================================================

@pytest.mark.parametrize("name", [
    "os", "subprocess", "harness", "harness.runner.plugin", "sandbox:os", "os:system",
    "__import__", "../evil", "_LAZY.clear", "Trial.__init__", "Trial:__globals__",
    "__path__", "__spec__x", "", " Trial", "Trial ",
])
def test_a_crafted_name_imports_nothing(name: str) -> None:
    import harness.api as api

    before = set(sys.modules)
    with pytest.raises(AttributeError):
        getattr(api, name)
    assert set(sys.modules) - before == set()


@pytest.mark.parametrize("package", [
    "harness.api", "harness.agents", "harness.budget",
    "harness.sandbox",
])
def test_every_lazy_name_comes_from_the_module_that_defines_it(package: str) -> None:
    table = importlib.import_module(package)._LAZY
    wrong = []
    for name, where in table.items():
        module, _, attr = where.partition(":")
        assert ":" not in attr and "." not in (attr or name), (name, where)
        value = getattr(importlib.import_module(module), attr or name)
        if (inspect.isclass(value) or inspect.isfunction(value)) \
                and value.__module__ != module:
            wrong.append((name, where, value.__module__))
    assert wrong == []
