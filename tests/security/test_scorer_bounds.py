"""Bounds on what crosses from the official eval to the host (issue 40, class 5).

A compile.sh that printed 800 MiB gave a 1.68 GB eval.json and 5.4 GB of RSS in the official
CLI. Now each eval step's output leaves the container cut (``docker_policy.capped``), the CLI
runs under a heap limit (``official_eval.limited``), an eval.json is read only below a size,
and the CLI's own output is read by its tail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Literal

import pytest

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.docker_policy import STEP_OUTPUT_CAP, capped
from benchmarks.programbench.official_eval import (
    MAX_EVAL_JSON_BYTES,
    EvalJsonTooLarge,
    _finish,
    limited,
    read_eval_json,
    read_tail,
)
from tests.security.scorer_support import write
from tests.support.suite import REPO_ROOT, run_env

FLOOD_MB = 200

# A fresh interpreter evaluates one submission and reports the largest resident set of any
# process it waited for: the official CLI (and the docker CLIs it ran).
MEASURE = '''
import json, resource, sys
from pathlib import Path
from benchmarks.programbench.fixture import ensure_fixture
from benchmarks.programbench.official_eval import evaluate_instance
fixture = ensure_fixture()
result = evaluate_instance(Path(sys.argv[1]), sys.argv[2], blob_dir=fixture.blob_dir)
peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print("RESULT " + json.dumps({"result": result.model_dump(mode="json"), "peak_mb": peak_mb}))
'''


@pytest.mark.docker
def test_a_compile_flood_stays_in_the_container(tmp_path: Path) -> None:
    from benchmarks.programbench.fixture import ensure_fixture
    from benchmarks.programbench.submission import build_submission

    fixture = ensure_fixture()
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy(Path(fixture.oracle_dir) / "calculator.sh", ws / "calculator.sh")
    # a correct build that floods both streams first
    write(ws / "compile.sh", "#!/bin/bash\n"
          f"head -c {FLOOD_MB * 1024 * 1024} /dev/zero | tr '\\0' x\n"
          f"head -c {FLOOD_MB * 1024 * 1024 // 4} /dev/zero | tr '\\0' y >&2\n"
          "cp calculator.sh executable\nchmod +x executable\n", 0o755)
    build_submission(ws, tmp_path / "src" / FIXTURE_ID / "submission.tar.gz")
    proc = subprocess.run([sys.executable, "-c", MEASURE, str(tmp_path / "src"), FIXTURE_ID],
                          cwd=REPO_ROOT, env=run_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))[7:])
    result = out["result"]
    assert result["official_eval_status"] == "completed", result
    assert result["score"] == 1.0  # the flood cost the build its log, not its verdict
    eval_json = Path(result["eval_json"])
    assert eval_json.stat().st_size < 8 * STEP_OUTPUT_CAP  # was 1.68 GB for 800 MiB
    log = json.loads(eval_json.read_text())
    compile_step = next(s for s in log["log"] if "compile.sh" in s.get("command", ""))
    assert "more bytes of stdout cut]" in compile_step["output"]
    assert "more bytes of stderr cut]" in compile_step["output"]
    assert out["peak_mb"] < 400, out["peak_mb"]  # was 5.4 GB of RSS in the CLI


def test_capped_keeps_the_status_and_the_streams_apart() -> None:
    flood = "head -c 3000000 /dev/zero | tr '\\0' x; echo done >&2; exit 7"
    proc = subprocess.run(["bash", "-lc", capped(flood)], capture_output=True, timeout=60)
    assert proc.returncode == 7
    assert proc.stdout.startswith(b"x" * STEP_OUTPUT_CAP)
    assert proc.stdout.endswith(f"[harness: {3000000 - STEP_OUTPUT_CAP} more bytes of stdout "
                                "cut]\n".encode())
    assert proc.stderr == b"done\n"
    # the command's own pipelines keep bash's default (no pipefail leaks into them)
    plain = subprocess.run(["bash", "-lc", capped("false | true")], timeout=60)
    assert plain.returncode == 0


def test_the_official_cli_runs_under_a_heap_limit() -> None:
    cmd = limited([sys.executable, "-c", "x = bytearray(6 << 30)"])
    assert Path(cmd[0]).name == "prlimit"
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "MemoryError" in proc.stderr


def test_an_oversized_eval_json_is_the_submissions_error_and_never_read(tmp_path: Path) -> None:
    big = tmp_path / f"{FIXTURE_ID}.eval.json"
    with open(big, "wb") as fh:
        fh.truncate(MAX_EVAL_JSON_BYTES + 1)  # sparse: costs no disk
    with pytest.raises(EvalJsonTooLarge):
        read_eval_json(big)
    from benchmarks.programbench.official_eval import CliRun

    run = CliRun(cmd=["programbench"], returncode=0, stdout="", stderr="", duration_s=1.0)
    result = _finish(FIXTURE_ID, run, big, tmp_path / "o", tmp_path / "e", None)
    assert (result.official_eval_status, result.error_code, result.error_cause) == (
        "error", "eval_json_too_large", "agent")


def test_the_clis_output_is_read_by_its_tail(tmp_path: Path) -> None:
    out = tmp_path / "stdout.txt"
    out.write_bytes(b"a" * (5 << 20) + b"Traceback: the end\n")
    text = read_tail(out, limit=1 << 20)
    assert len(text) == 1 << 20 and text.endswith("Traceback: the end\n")
    assert os.path.getsize(out) > len(text)


def test_a_test_recorded_twice_is_an_integrity_failure_never_a_pass(tmp_path: Path) -> None:
    """pytest-rerunfailures 16.6.1 writes a bare <testcase/> per rerun: a test that failed
    twice and passed never would read 2 passes of 3 (upstream ProgramBench issue 64)."""
    from programbench.eval.eval import EvaluationResult, TestResult

    from benchmarks.programbench.official_eval import CliRun

    def case(status: Literal["passed", "failure"]) -> TestResult:
        return TestResult(name="tests.test_calc.test_add", branch="b1", status=status,
                          extra={})

    drifted = EvaluationResult(test_results=[case("failure"), case("passed"), case("passed")],
                               test_branches=["b1"])
    path = tmp_path / f"{FIXTURE_ID}.eval.json"
    path.write_text(drifted.model_dump_json())
    run = CliRun(cmd=["programbench"], returncode=0, stdout="", stderr="", duration_s=1.0)
    result = _finish(FIXTURE_ID, run, path, tmp_path / "o", tmp_path / "e", None)
    assert (result.official_eval_status, result.error_code, result.score) == (
        "error", "junit_duplicate_records", None)
    assert result.error_message is not None and "tests.test_calc.test_add" in (
        result.error_message)
    honest = EvaluationResult(test_results=[case("failure")], test_branches=["b1"])
    path.write_text(honest.model_dump_json())
    assert _finish(FIXTURE_ID, run, path, tmp_path / "o", tmp_path / "e", None).score == 0.0
