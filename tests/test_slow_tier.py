"""The slow tier (``tests/conftest.py``): tests marked ``slow`` are left out of the README's
test command, said so at the end of the run, and run by CI in a second command; no test is
in neither run.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from tests.support.suite import FORK_SERVER, QUIET_PLUGINS

ROOT = Path(__file__).resolve().parents[1]
# A module with tests of both tiers (the gVisor runs are slow, the refusals are not).
MODULE = "tests/sandbox/test_sandbox_runsc.py"
TIER = "python3 -m pytest tests -n 3 --slow -m slow"


def collect(*args: str) -> tuple[list[str], str]:
    """``pytest MODULE --collect-only -q ARGS`` from the repository root (a fork of the tests'
    warm pytest server)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS")}
    done = FORK_SERVER.run([*QUIET_PLUGINS, MODULE, "--collect-only", "-q", *args], ROOT, env,
                           120)
    assert done.returncode == 0, done.output
    ids = [line for line in done.output.splitlines() if line.startswith(MODULE + "::")]
    return ids, done.output


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
