"""Scoring cannot be steered from the submission: adversarial command agents on the
ProgramBench fixture, scored by the real ``programbench eval`` in real Docker."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from benchmarks.programbench.fixture import ensure_fixture
from benchmarks.programbench.program_user import PROGRAM_UID
from benchmarks.programbench.submission import list_submission
from tests.security.scorer_support import (
    FORCE_PASS_CONFTEST,
    PRINT_42_COMPILE,
    TARGET,
    agent_command,
    fixture_row,
    raw_score_alongside,
)
from tests.support.suite import run_pytest

pytestmark = pytest.mark.docker

CHEAT = {
    "compile.sh": PRINT_42_COMPILE,
    "tox.ini": "[pytest]\n",
    "conftest.py": FORCE_PASS_CONFTEST,
    "eval/conftest.py": FORCE_PASS_CONFTEST,
    "eval/tests/conftest.py": FORCE_PASS_CONFTEST,
}


def official_eval_json(run, row: dict) -> dict:  # type: ignore[no-untyped-def]
    folder = (run.root / row["output_paths"]["submission"]).parent
    return json.loads((folder / "official_eval.json").read_text())


def test_wrong_program_with_forcing_conftest_scores_exactly_zero(tmp_path: Path) -> None:
    # control: the bare official eval is fooled by these files (what the issue measured)
    with raw_score_alongside(tmp_path / "control", CHEAT) as control:
        run = run_pytest(TARGET, tmp_path / "run", "--pb-fixtures", "-k", "calculator", "--agent", "command",
                         "--agent-command", agent_command(CHEAT))
    assert control() == 1.0
    row = fixture_row(run)
    assert row["official_eval_status"] == "completed", run.out
    assert row["score"] == 0.0 and row["resolved"] is False
    assert (row["tests_passed"], row["tests_total"]) == (0, 3)
    assert row["outcome"] == "scored" and row["infra"] is False
    removed = set(row["details"]["submission"]["scorer_files_removed"])
    assert {"conftest.py", "tox.ini", "eval/conftest.py", "eval/tests/conftest.py"} <= removed
    names = list_submission(run.root / row["output_paths"]["submission"])
    assert "compile.sh" in names and not {"conftest.py", "tox.ini"} & set(names)
    assert not any(n == "eval" or n.startswith("eval/") for n in names)
    scored = (run.root / row["output_paths"]["submission"]).read_bytes()
    assert row["details"]["submission"]["sha256_scored"] == hashlib.sha256(scored).hexdigest()
    evidence = official_eval_json(run, row)
    assert {r["name"] for r in evidence["scorer_guard"]["removed"]} == removed
    assert evidence["docker_policy"]["network"] == "none"


def test_overrides_written_by_compile_sh_are_removed_before_the_tests(tmp_path: Path) -> None:
    build_cheat = PRINT_42_COMPILE + (
        "printf '[pytest]\\n' > tox.ini\n"
        "cp /workspace/.hidden/force.py conftest.py\n"
        "printf 'not a folder' > eval\n"  # the tests cannot even be unpacked over this
    )
    files = {"compile.sh": build_cheat, ".hidden/force.py": FORCE_PASS_CONFTEST}
    run = run_pytest(TARGET, tmp_path / "run", "--pb-fixtures", "-k", "calculator", "--agent", "command",
                     "--agent-command", agent_command(files))
    row = fixture_row(run)
    assert row["official_eval_status"] == "completed", run.out
    assert row["score"] == 0.0 and row["resolved"] is False and row["infra"] is False
    assert set(row["details"]["submission"]["scorer_build_files_removed"]) == {
        "/workspace/conftest.py", "/workspace/tox.ini", "/workspace/eval"}


def test_honest_test_scaffolding_does_not_break_a_correct_solution(tmp_path: Path) -> None:
    files = {rel: data.decode() for rel, data in ensure_fixture().oracle_contents().items()}
    files |= {
        "conftest.py": "raise RuntimeError(\"the agent's own test setup\")\n",
        "pytest.ini": "[pytest]\ntestpaths = tests\naddopts = -p no_such_plugin\n",
        "tests/test_x.py": "def test_x():\n    assert False\n",
    }
    # control: the bare official eval zeroes this correct solution
    with raw_score_alongside(tmp_path / "control", files) as control:
        run = run_pytest(TARGET, tmp_path / "run", "--pb-fixtures", "-k", "calculator", "--agent", "command",
                         "--agent-command", agent_command(files))
    assert control() == 0.0
    row = fixture_row(run)
    assert row["official_eval_status"] == "completed", run.out
    assert row["score"] == 1.0 and row["resolved"] is True
    assert set(row["details"]["submission"]["scorer_files_removed"]) == {"conftest.py", "pytest.ini"}
    names = list_submission(run.root / row["output_paths"]["submission"])
    assert "tests/test_x.py" in names  # kept: pytest never looks there


def test_a_program_that_forges_its_results_scores_what_it_earns(tmp_path: Path) -> None:
    # The program under test (always 42) leaves a process behind that waits for pytest's
    # results.xml and strips every failure from it: the bare eval reads all tests passed.
    forger = (
        "import os, re, time\n"
        "path = '/workspace/eval/results.xml'\n"
        "for _ in range(200000):\n"
        "    try:\n"
        "        text = open(path).read()\n"
        "    except OSError:\n"
        "        text = ''\n"
        "    if '<failure' in text and text.rstrip().endswith('>'):\n"
        "        text = re.sub(r'<failure.*?</failure>', '', text, flags=re.S)\n"
        "        open(path, 'w').write(text.replace('failures=\"3\"', 'failures=\"0\"'))\n"
        "    time.sleep(0.001)\n"
    )
    program = (
        "#!/bin/sh\n"
        "if [ ! -e /tmp/.spawned ]; then touch /tmp/.spawned\n"
        "  setsid python3 /workspace/forger.py >/dev/null 2>&1 </dev/null &\n"
        "fi\necho 42\n"
    )
    files = {"forger.py": forger, "program.sh": program,
             "compile.sh": "#!/bin/bash\ncp program.sh executable\nchmod +x executable\n"}
    # control: the bare official eval is fooled
    with raw_score_alongside(tmp_path / "control", files) as control:
        run = run_pytest(TARGET, tmp_path / "run", "--pb-fixtures", "-k", "calculator", "--agent", "command",
                         "--agent-command", agent_command(files))
    assert control() == 1.0
    row = fixture_row(run)
    assert row["official_eval_status"] == "completed", run.out
    assert row["score"] == 0.0 and row["resolved"] is False and row["tests_passed"] == 0
    assert official_eval_json(run, row)["docker_policy"]["results_guarded"] >= 1


def test_batch_eval_scores_the_guarded_submission(tmp_path: Path) -> None:
    run = run_pytest(TARGET, tmp_path / "run", "--pb-fixtures", "-k", "calculator", "--agent", "command",
                     "--agent-command", agent_command(CHEAT), "--pb-eval", "batch")
    row = fixture_row(run)
    assert row["official_eval_status"] == "completed", run.out
    assert row["score"] == 0.0 and row["resolved"] is False and row["tests_passed"] == 0
    assert "conftest.py" in row["details"]["submission"]["scorer_files_removed"]
    assert official_eval_json(run, row)["docker_policy"]["network"] == "none"


def test_a_build_that_plants_a_pytest_plugin_gains_nothing(tmp_path: Path) -> None:
    # the official eval runs compile.sh as root: a plugin module plus a .pth that loads it
    # in every Python process of the committed image forces every test to pass. Ours runs
    # the build as the program user: the writes fail (EPERM), the program earns its 0.
    plant = (
        "D=/usr/local/lib/python3.11/dist-packages\nmkdir -p $D\n"
        "cp /workspace/.hidden/force.py $D/force_pass_plugin.py\n"
        "echo 'import os; os.environ.setdefault(\"PYTEST_PLUGINS\", \"force_pass_plugin\")'"
        " > $D/zz_force.pth\n"
    )
    files = {"compile.sh": PRINT_42_COMPILE + plant, ".hidden/force.py": FORCE_PASS_CONFTEST}
    # control: the bare official eval is fooled
    with raw_score_alongside(tmp_path / "control", files) as control:
        run = run_pytest(TARGET, tmp_path / "run", "--pb-fixtures", "-k", "calculator", "--agent", "command",
                         "--agent-command", agent_command(files))
    assert control() == 1.0
    row = fixture_row(run)
    # the writes fail (EPERM) and so does compile.sh: refused by name, never scored
    assert (row["outcome"], row["reason_code"]) == ("agent_failed", "build_needs_root"), run.out
    assert row["score"] is None and row["infra"] is False
    evidence = official_eval_json(run, row)
    assert evidence["docker_policy"]["build_user"] == PROGRAM_UID
    assert "Permission denied" in evidence["error_message"]
    assert not evidence["docker_policy"]["refused"]  # nothing to refuse: nothing was written
