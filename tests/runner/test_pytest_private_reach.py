"""A private attribute of pytest the plugin touches: ``_keyboardinterrupt_memo``.

(The others: a carried item's reports, :mod:`harness.runner.carried`, call
``session._setupstate.teardown_exact`` and fill ``Item.location``, a cached property, per
test function; ``tests/runner/test_resume_carry.py`` checks those reports against pytest's
own: the file and line in JUnit XML and ``-rs``.)

A refusal (``pytest.exit`` from the harness) is printed once as ``Exit: ...``; pytest's
terminal reporter would repeat it framed in ``!`` at unconfigure. No public API drops that
repeat, so the plugin clears the reporter's ``_keyboardinterrupt_memo``; pyproject pins
pytest's major version and this test fails loudly if the attribute stops working.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.suite import FORK_SERVER, pytest_result, run_env

REPO = Path(__file__).resolve().parents[2]


def test_a_refusal_is_printed_once(tmp_path: Path) -> None:
    proc = FORK_SERVER.run(
        ["benchmarks/programbench", "--pb-fixtures", "-k", "calculator", "--runtime", "runsc",
         "-p", "no:cacheprovider", "--run-root", str(tmp_path / "run")],
        REPO, run_env() | {"PYTHONPATH": str(REPO)}, 300)  # python -m pytest, in a fork
    out = proc.output
    assert proc.returncode == 2, out[-2000:]
    assert out.count("ProgramBench protects the reference program") == 1, out[-2000:]
    pytest_result(proc.returncode, out).stdout.no_fnmatch_line("*!!!!*")  # no pytest.exit banner
