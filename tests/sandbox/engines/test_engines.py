"""One run over two Docker engines: the system one and a second dockerd started here.

The ProgramBench test's engine starts empty (the harness moves the fixture image to it); the
Cowork tests' engines start with the Cowork images already there (``cowork_engine``: a
copy-on-write view of an image template, :mod:`tests.sandbox.engines.engines_support`).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
import uuid
from pathlib import Path

import docker
import pytest

from benchmarks.programbench import FIXTURE_ID
from harness.sandbox.cli import sweep_command
from tests.sandbox.engines.engines_support import (
    Engine,
    assert_no_leaks,
    cowork_engine,
    engines_file,
    second_engine,
)
from tests.support.suite import REPO_ROOT, Run, run_pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]
__all__ = ["cowork_engine", "second_engine"]  # the fixtures, imported for the tests below

COWORK = Path(__file__).resolve().parents[2] / "fixtures" / "cowork_mini"
SYSTEM = "local"  # the engine of the environment (the system dockerd)
# Three of cowork_mini's five tasks (both kinds: files, and rows in the database): one more
# than the two engines' slots together, which is all that placement, capacity and a lost
# engine need; each further instance was about 6 CPU-s of the suite's time.
TASKS = ("excel-sales-summary", "email-weekly-report", "sklad-reorder-excel")
SELECT = tuple(arg for iid in TASKS for arg in ("--instance", iid))


KILLER = """
import os, signal
from harness.sandbox import placement

def pytest_runtest_call(item):
    slot = placement.active()
    if slot is not None and slot.engine.url == {url!r}:  # placed on it: kill it
        try:
            os.kill({pid}, signal.SIGKILL)
        except ProcessLookupError:
            pass
"""


def cowork(root: Path, *args: str, env: dict[str, str] | None = None) -> Run:
    return run_pytest(
        "benchmarks/cowork_bench",
        root,
        "--cowork-root",
        str(COWORK),
        "--cowork-allow-dirty-bench",
        "--agent",
        "oracle",
        *args,
        env=env,
        timeout=900,
    )


class EventLog:
    """A live event stream of one engine for one run id (the engine keeps only its last 256
    events, and the system engine is shared: read them as they happen)."""

    def __init__(self, client: docker.DockerClient, run_id: str) -> None:
        self.stream = client.events(
            decode=True, filters={"type": "container", "label": f"harness.run={run_id}"}
        )
        self.events: list[dict] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        with contextlib.suppress(Exception):  # closing the stream ends the loop
            for ev in self.stream:
                self.events.append(ev)

    def spans(self) -> dict[str, tuple[float, float]]:
        """Per instance: its first container create and last container destroy (the run has
        ended: every container it created was removed, its destroy event is on the way)."""

        def count(action: str) -> int:
            return sum(1 for ev in list(self.events) if ev.get("Action") == action)

        deadline = time.monotonic() + 10
        while count("destroy") < count("create") and time.monotonic() < deadline:
            time.sleep(0.05)
        self.stream.close()
        self.thread.join(timeout=10)
        spans: dict[str, list[float]] = {}
        for ev in self.events:
            if ev.get("Action") in ("create", "destroy"):
                inst = ev["Actor"]["Attributes"].get("harness.instance", "?")
                spans.setdefault(inst, []).append(ev["timeNano"] / 1e9)
        return {k: (min(v), max(v)) for k, v in spans.items()}


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    points = sorted(
        [(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals], key=lambda p: (p[0], p[1])
    )
    now = most = 0
    for _, step in points:
        now += step
        most = max(most, now)
    return most


def same_harness_commit(root: Path) -> None:
    """A commit made in the checkout while the first run went on must not turn the resume
    into the refusal of another harness commit (tests/benchmarks/cowork/test_cowork_resume_compat.py)."""
    head = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    path = root / "run_manifest.json"
    data = json.loads(path.read_text())
    data["source"]["head"] = head
    path.write_text(json.dumps(data))


def test_programbench_fixture_on_the_second_engine_scores_one(
    tmp_path: Path, second_engine: Engine
) -> None:
    path = engines_file(tmp_path, [(second_engine.url, 1)])
    run = run_pytest(
        "benchmarks/programbench",
        tmp_path / "run",
        "--pb-fixtures",
        "-k",
        "calculator",
        "--agent",
        "oracle",
        "--engines",
        str(path),
    )
    assert run.rc == 0, run.out
    row = run.latest[FIXTURE_ID]
    assert row["score"] == 1.0 and row["resolved"] is True
    engine = row["details"]["engine"]
    assert (engine["url"], engine["index"]) == (second_engine.url, 0)
    (engine,) = run.manifest["extra"]["engines"]
    assert engine["url"] == second_engine.url and engine["capacity"] == 1
    assert engine["server_version"]
    client = second_engine.client()  # the image was moved there, tags and all
    tags = {t for img in client.images.list() for t in img.tags}
    assert any(t.startswith("programbench/") for t in tags), tags
    assert_no_leaks(client, tmp_path)
    client.close()
    assert_no_leaks(docker.from_env(), tmp_path)


def test_cowork_over_both_engines_capacity_one_each(tmp_path: Path, cowork_engine: Engine) -> None:
    path = engines_file(tmp_path, [(SYSTEM, 1), (cowork_engine.url, 1)])
    run_id = f"engines-{uuid.uuid4().hex[:8]}"
    system, second = docker.from_env(), cowork_engine.client()
    logs = [EventLog(system, run_id), EventLog(second, run_id)]
    run = cowork(tmp_path / "run", *SELECT, "-n", "3", "--engines", str(path), "--run-id", run_id)
    assert run.rc == 0, run.out
    assert len(run.latest) == 3 and not any(r["infra"] for r in run.latest.values())
    used = {r["details"]["engine"]["index"] for r in run.latest.values()}
    assert used == {0, 1}, used
    # the instances' containers (each engine's capacity probe is labelled with the run too)
    spans = [span for log in logs for inst, span in log.spans().items() if inst in run.latest]
    assert len(spans) == 3, spans
    assert max_overlap(spans) <= 2, spans  # 3 workers, 2 slots: never more than 2 at once
    assert_no_leaks(second, tmp_path)
    assert_no_leaks(system, tmp_path)
    # `harness sweep --docker-host` reaches the other engine (a leftover made by hand)
    second.volumes.create(
        f"left-{run_id}", labels={"harness.run": run_id, "harness.run_root": str(run.root)}
    )
    assert sweep_command(["--run", run_id, "--docker-host", cowork_engine.url]) == 0
    assert_no_leaks(second, tmp_path)
    second.close()


def test_a_killed_engine_loses_its_instances_and_resume_finishes_them(
    tmp_path: Path, cowork_engine: Engine
) -> None:
    doomed = cowork_engine  # its own engine, the images already there; killed below
    path = engines_file(tmp_path, [(SYSTEM, 1), (doomed.url, 1)])
    # The doomed engine dies while its first instance runs (the agent waits for it).
    kill_plugin = tmp_path / "plugins" / "engine_killer.py"
    kill_plugin.parent.mkdir()
    kill_plugin.write_text(KILLER.format(url=doomed.url, pid=doomed.pid))
    pythonpath = os.pathsep.join([str(kill_plugin.parent), os.environ.get("PYTHONPATH", "")])
    first = cowork(
        tmp_path / "run",
        *SELECT,
        "-n",
        "2",
        "--engines",
        str(path),
        "-p",
        "engine_killer",
        env={"PYTHONPATH": pythonpath},
    )
    assert first.rc == 1, first.out
    lost = [r for r in first.latest.values() if r["reason_code"] == "engine_lost"]
    assert lost and all(r["infra"] and r["details"]["engine"]["index"] == 1 for r in lost)
    done = [r for r in first.latest.values() if not r["infra"]]
    assert done and all(r["details"]["engine"]["index"] == 0 for r in done)
    assert len(lost) + len(done) == 3
    assert first.manifest["extra"]["engines_lost"] == [doomed.url]
    same_harness_commit(first.root)
    again = cowork(tmp_path / "resumed", "--resume-from", str(first.root), "--engines", str(path))
    assert again.rc == 0, again.out
    redone = [again.latest[r["instance_id"]] for r in lost]
    assert all(not r["infra"] and r["details"]["engine"]["index"] == 0 for r in redone)
    assert again.manifest["extra"]["engines"][1]["reachable"] is False
    assert_no_leaks(docker.from_env(), tmp_path)
