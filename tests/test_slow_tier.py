"""The slow tier (``tests/conftest.py``): tests marked ``slow`` are left out of the README's
test command, said so at the end of the run, and run by CI in a second command; no test is
in neither run. Asking for the tier (``-m slow``) or for one of its tests by node id runs it.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.suite import FORK_SERVER, QUIET_PLUGINS, run_env

ROOT = Path(__file__).resolve().parents[1]
# A module with tests of both tiers (the gVisor runs are slow, the refusals are not).
MODULE = "tests/sandbox/test_sandbox_runsc.py"
TIER = "python3 -m pytest tests -n 3 --slow -m slow"


def pytest_(*args: str) -> tuple[int, str]:
    """``pytest ARGS`` from the repository root (a fork of the tests' warm pytest server)."""
    done = FORK_SERVER.run([*QUIET_PLUGINS, *args], ROOT, run_env(), 120)
    return done.returncode, done.output


def collect(*args: str, target: str = MODULE) -> tuple[list[str], str]:
    rc, out = pytest_(target, "--collect-only", "-q", *args)
    assert rc == 0, out
    return [line for line in out.splitlines() if line.startswith(MODULE + "::")], out


def test_the_default_run_leaves_the_slow_tier_out_and_says_so() -> None:
    default, out = collect()
    slow, _ = collect("--slow", "-m", "slow")
    everything, _ = collect("--slow")
    assert default and slow
    assert sorted(default + slow) == sorted(everything)  # each test in exactly one tier
    assert f"slow tier: {len(slow)} tests marked slow left out of this run" in out
    assert re.search(rf"{len(default)}/{len(everything)} tests collected "
                     rf"\({len(slow)} deselected\)", out), out
    # Asking for the tier, or for one of its tests by node id, needs no --slow.
    assert collect("-m", "slow")[0] == slow
    assert collect(target=slow[0])[0] == [slow[0]]


def test_under_xdist_the_workers_count_reaches_the_summary() -> None:
    # One test of a slow-tier module without Docker: nothing is left to run (exit 5), and the
    # controller prints what its workers left out.
    rc, out = pytest_("tests/reports/test_report_large.py", "-n", "2", "-k", "small")
    assert rc == 5, out
    assert "slow tier: 1 test marked slow left out of this run" in out, out


def test_ci_runs_the_readme_command_and_then_the_slow_tier() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    readme = (ROOT / "README.md").read_text()
    assert "python3 -m pytest tests -n 3" in ci
    assert TIER in ci and ci.index(TIER) > ci.index("python3 -m pytest tests -n 3")
    assert TIER in readme
