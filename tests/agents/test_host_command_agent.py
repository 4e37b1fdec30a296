"""``--agent host-command``: a script on the host solves the ProgramBench fixture through
``harness exec`` (the sandbox as the agent user, no Docker socket needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.fixture import ensure_fixture
from harness.testing.suite import run_pytest

pytestmark = pytest.mark.docker
TARGET = "benchmarks/programbench"


def agent_script(path: Path) -> Path:
    files = ensure_fixture().oracle_contents()
    lines = ["set -eu",
             'test -n "$HARNESS_SANDBOX" && test -S "$HARNESS_EXEC_SOCKET"',
             'grep -q . "$HARNESS_INSTRUCTION_FILE"',
             'echo "user=$(harness exec -- id -un)"',
             'echo "pwd=$(harness exec pwd)"',
             "echo \"args=$(harness exec -- printf '%s,' a -- b)\"",
             'echo "model_key=${HARNESS_MODEL_API_KEY:-absent} named_len=${#AGENT_TEST_KEY}"']
    for rel, data in sorted(files.items()):
        lines.append(f"harness exec -- bash -c 'cat > {rel} && chmod 755 {rel}' <<'EOF'\n"
                     f"{data.decode()}EOF")
    lines += ['echo "sum=$(harness exec "bash compile.sh && ./executable 2 + 3")"',
              "set +e; harness exec --timeout 2 -- sleep 30; echo \"timeout_rc=$?\"",
              "harness exec -- sh -c 'exit 7'; echo \"exit_rc=$?\"; set -e",
              "echo '{\"cost_usd\": 0.25, \"prompt_tokens\": 40, \"completion_tokens\": 2}' "
              '> "$HARNESS_COST_FILE"']
    path.write_text("\n".join(lines) + "\n")
    return path


def test_host_command_agent_solves_the_fixture_through_harness_exec(tmp_path: Path) -> None:
    script = agent_script(tmp_path / "agent.sh")
    run = run_pytest(TARGET, tmp_path / "run", "--pb-fixtures", "-k", "calculator", "--agent", "host-command",
                     "--agent-command", f"bash {script}", "--agent-env", "AGENT_TEST_KEY",
                     env={"HARNESS_MODEL_API_KEY": "sk-planted-model-key-0123456789",
                          "AGENT_TEST_KEY": "named-agent-key-0123456789"})
    assert run.rc == 0, run.out
    row = run.latest[FIXTURE_ID]
    assert row["score"] == 1.0 and row["resolved"] is True, row
    out = (run.root / row["output_paths"]["agent_stdout"]).read_text()
    assert "user=agent" in out and "pwd=/workspace" in out and "sum=5" in out
    assert "args=a,--,b," in out  # only the leading -- ends harness exec's options
    assert "timeout_rc=124" in out and "exit_rc=7" in out
    # only named variables reach the host agent: the runner's model key does not
    assert "model_key=absent named_len=26" in out
    assert row["cost_usd"] == 0.25 and row["cost_known"] is True
    assert row["details"]["cost_source"] == "agent_reported"
    assert row["tokens"] == {"prompt": 40, "completion": 2, "total": 42}


def test_harness_exec_outside_an_agent_refuses(tmp_path: Path) -> None:
    import subprocess

    env = {k: v for k, v in __import__("os").environ.items() if k != "HARNESS_EXEC_SOCKET"}
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "exec", "--", "true"],
                          capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and "HARNESS_EXEC_SOCKET" in proc.stderr
