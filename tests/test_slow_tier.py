"""The slow tier (``tests/conftest.py``): tests marked ``slow`` are left out of the README's
test command, said so at the end of the run, and run by CI in a second command; no test is
in neither run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# A module with tests of both tiers (the gVisor runs are slow, the refusals are not).
MODULE = "tests/sandbox/test_sandbox_runsc.py"
TIER = "python3 -m pytest tests -n 3 --slow -m slow"


def collect(*args: str) -> tuple[list[str], str]:
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent.sock"}
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", MODULE, "--collect-only", "-q", "-p", "no:cacheprovider",
         *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids = [line for line in proc.stdout.splitlines() if line.startswith(MODULE + "::")]
    return ids, proc.stdout


def test_the_default_run_leaves_the_slow_tier_out_and_says_so() -> None:
    default, out = collect()
    slow, _ = collect("--slow", "-m", "slow")
    everything, _ = collect("--slow")
    assert default and slow
    assert sorted(default + slow) == sorted(everything)  # each test in exactly one tier
    assert f"slow tier: {len(slow)} tests marked slow left out of this run" in out
    assert re.search(rf"{len(default)}/{len(everything)} tests collected "
                     rf"\({len(slow)} deselected\)", out), out


def test_ci_runs_the_readme_command_and_then_the_slow_tier() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    readme = (ROOT / "README.md").read_text()
    assert "python3 -m pytest tests -n 3" in ci
    assert TIER in ci and ci.index(TIER) > ci.index("python3 -m pytest tests -n 3")
    assert TIER in readme
