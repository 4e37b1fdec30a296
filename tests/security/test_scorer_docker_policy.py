"""No network for any container of the official eval: ``programbench eval`` drives docker
through our policy shim, which forces ``--network none`` on every container it creates."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.docker_policy import PolicyRefused, image_of, rewrite
from benchmarks.programbench.fixture import ensure_fixture
from benchmarks.programbench.official_eval import evaluate_instance
from benchmarks.programbench.submission import build_submission
from tests.security.scorer_support import (
    FIXTURE_IMAGE,
    bridge_gateway,
    fetch_script,
    http_recorder,
    write,
)

# `docker diff` entries (container paths), committed data: tests/data/scorer/README.md
DIFF_CASES = Path(__file__).resolve().parents[1] / "data" / "scorer" / "docker_diff_cases.json"


def test_every_created_container_gets_network_none() -> None:
    run = ["run", "-d", "--init", "--name", "x", "-w", "/workspace", "img", "sleep", "2h"]
    nnp = ["--security-opt", "no-new-privileges"]  # no setuid bit works (issue 40)
    assert rewrite(run) == ["run", "--network", "none", *nnp, *run[1:]]
    assert rewrite(["container", "create", "img"]) == [
        "container", "create", "--network", "none", *nnp, "img"]
    for passthrough in (["exec", "-i", "c", "tar", "-xf", "-"], ["cp", "a", "c:/b"],
                        ["commit", "c", "ref"], ["rmi", "-f", "ref"], []):
        assert rewrite(passthrough) == passthrough
    for refused in (["run", "--network", "host", "img"], ["run", "--net=bridge", "img"],
                    ["create", "--network=host", "img"], ["network", "connect", "n", "c"],
                    ["-H", "tcp://elsewhere:2375", "run", "img"]):
        with pytest.raises(PolicyRefused):
            rewrite(refused)
    assert rewrite(["create", "img"], "pb-x") == [
        "create", "--network", "none", *nnp, "--label", "harness.pb_eval=pb-x", "img"]
    assert image_of(rewrite(run, "pb-x")) == "img"
    assert image_of(["run", "-d", "--cpus", "2", "-e", "A=b", "--init", "repo/i:t", "sleep"]) == (
        "repo/i:t")


@pytest.mark.docker
def test_compile_and_tests_cannot_reach_the_host(tmp_path: Path) -> None:
    fixture = ensure_fixture()
    gateway = bridge_gateway()
    with http_recorder() as (port, hits):
        base = f"http://{gateway}:{port}"
        # control: a container on Docker's default network reaches this server
        subprocess.run(["docker", "run", "--rm", FIXTURE_IMAGE, "sh", "-c",
                        fetch_script(f"{base}/control")], check=True, timeout=120)
        assert hits == ["/control"]
        ws = tmp_path / "ws"
        ws.mkdir()
        shutil.copy(Path(fixture.oracle_dir) / "calculator.sh", ws / "calculator.sh")
        program = f"#!/bin/sh\n{fetch_script(base + '/test')}\nexec /workspace/real.sh \"$@\"\n"
        write(ws / "compile.sh", "#!/bin/bash\n" + fetch_script(f"{base}/compile") + "\n"
              "cp calculator.sh real.sh\ncat > executable <<'EOF'\n" + program + "EOF\n"
              "chmod +x executable real.sh\n", 0o755)
        build_submission(ws, tmp_path / "src" / FIXTURE_ID / "submission.tar.gz")
        result = evaluate_instance(tmp_path / "src", FIXTURE_ID, blob_dir=fixture.blob_dir)
        assert hits == ["/control"]  # neither compile.sh nor the program under test got out
    assert result.official_eval_status == "completed", result.error_message
    assert result.score == 1.0  # a correct program loses nothing without network
    assert result.docker_policy is not None and result.docker_policy.network == "none"
    assert result.docker_policy.containers_created >= 2  # compile + one test branch
    assert result.docker_policy.refused == []


def test_build_changes_that_steer_the_tests_are_told_apart_from_a_build() -> None:
    from benchmarks.programbench.docker_policy import _steers

    # stored relative to the container's root: `docker diff` prints them from "/"
    cases = {group: [(kind, "/" + rel) for kind, rel in pairs]
             for group, pairs in json.loads(DIFF_CASES.read_text()).items()}
    for kind, path in cases["steering"]:
        assert _steers(kind, path) is True, path
    for kind, path in cases["harmless"]:
        assert _steers(kind, path) is False, path
    # decided in the container: a changed file (not a parent dir), a pytest11 entry point
    for kind, path in cases["decided_in_container"]:
        assert _steers(kind, path) is None, path


def test_results_guard_spares_only_pytest_its_line_and_the_keep_alive(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks.programbench import results_guard_plugin as plugin

    monkeypatch.setattr(plugin.os, "getpid", lambda: 50)
    table = {1: (0, 1), 7: (1, 2),          # init, its keep-alive `sleep`
             30: (0, 10), 40: (30, 11),     # the exec's shell, run.sh
             50: (40, 12), 60: (50, 13),    # pytest, an xdist worker
             61: (60, 14),                  # a program a test left running below the worker
             70: (1, 15), 71: (70, 16),     # a daemon reparented to init, its child
             35: (30, 11), 36: (35, 20),    # the exec's output filter, its late `wc`
             80: (1, 17), 81: (80, 18)}     # a daemon that started a child, then exited
    del table[80]  # ... so its child was reparented: 81's parent is gone from the table
    table[81] = (1, 18)
    assert plugin._kept(table) == {1, 7, 30, 35, 36, 40, 50, 60}
