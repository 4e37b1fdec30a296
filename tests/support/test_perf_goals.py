"""The perf gate: a figure past its noise margin fails after one more measurement, one
within the margin warns, a yardstick never fails, and the history names regressions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.perf import goals
from tests.support.suite import REPO_ROOT, run_env


@pytest.fixture(autouse=True)
def _fresh_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(goals, "FIGURES", {})
    monkeypatch.setattr(goals, "REMEASURE", set())


def test_a_ratio_past_its_margin_fails_when_goals_are_enforced() -> None:
    with pytest.raises(pytest.fail.Exception,
                       match=r"eval = 1\.640x \(goal <= 1\.05x, fails past 1\.208x\)"):
        goals.check_goal("eval", 1.64, 1.05, mode="enforce")


def test_a_ratio_within_its_margin_warns_and_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert goals.check_goal("eval", 1.10, 1.05, mode="enforce") is False
    assert "PERF WARNING eval = 1.100x (goal <= 1.05x, fails past 1.208x)" in (
        capsys.readouterr().out)
    assert goals.FIGURES["eval"].state == "tolerated"


def test_a_higher_is_better_goal_is_widened_downwards() -> None:
    assert goals.check_goal("throughput", 1.6, 1.8, op=">=", mode="enforce") is False
    assert goals.FIGURES["throughput"].state == "tolerated"  # 1.8 / 1.15 = 1.565
    with pytest.raises(pytest.fail.Exception, match=r"fails past 1\.565x"):
        goals.check_goal("throughput2", 1.5, 1.8, op=">=", mode="enforce")


def test_a_first_measurement_past_the_margin_asks_for_one_more() -> None:
    with pytest.raises(goals.PastMargin):
        goals.check_goal("eval", 1.64, 1.05, mode="enforce", nodeid="t::a")
    assert {"t::a"} == goals.REMEASURE
    # the second measurement: the better of the two counts
    assert goals.check_goal("eval", 1.07, 1.05, mode="enforce", nodeid="t::a") is False
    fig = goals.FIGURES["eval"]
    assert (fig.value, fig.values, fig.state) == (1.07, [1.64, 1.07], "tolerated")


def test_both_measurements_past_the_margin_fail() -> None:
    with pytest.raises(goals.PastMargin):
        goals.check_goal("eval", 1.64, 1.05, mode="enforce", nodeid="t::a")
    with pytest.raises(pytest.fail.Exception, match=r"best of \[1\.64, 1\.3\]"):
        goals.check_goal("eval", 1.3, 1.05, mode="enforce", nodeid="t::a")


def test_warn_mode_never_fails_a_figure(capsys: pytest.CaptureFixture[str]) -> None:
    assert goals.check_goal("eval", 1.64, 1.05, mode="warn", nodeid="t::a") is False
    assert "PERF WARNING eval = 1.640x" in capsys.readouterr().out
    assert not goals.REMEASURE


def test_a_yardstick_past_its_goal_is_named_and_never_fails(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert goals.check_goal("waiting", 3.0, 1.15, yardstick=True, mode="enforce",
                            nodeid="t::w") is False
    assert "waiting = 3.000x (goal <= 1.15x, a yardstick)" in capsys.readouterr().out
    assert goals.FIGURES["waiting"].state == "yardstick_missed"


@pytest.mark.parametrize("broken", [0.0, -1.0, float("nan"), float("inf")])
def test_a_broken_measurement_fails_in_either_mode(broken: float) -> None:
    for mode in goals.MODES:
        with pytest.raises(pytest.fail.Exception, match="broken measurement"):
            goals.check_goal("eval", broken, 1.05, mode=mode, yardstick=True)


def test_an_unknown_mode_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_PERF_GOALS", "lenient")
    with pytest.raises(pytest.UsageError, match="HARNESS_PERF_GOALS='lenient'"):
        goals.check_goal("eval", 1.0, 1.05)


def _session() -> pytest.Session:
    lines: list[str] = []
    reporter = SimpleNamespace(write_line=lines.append, lines=lines)
    return SimpleNamespace(config=SimpleNamespace(  # type: ignore[return-value]
        pluginmanager=SimpleNamespace(get_plugin=lambda name: reporter)), reporter=reporter)


def test_the_figures_are_merged_into_the_json_file_and_the_history(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "perf_ratios.json"
    out.write_text(json.dumps({"older": {"value": 2.0}}))
    history = tmp_path / "ci" / "perf_history.jsonl"
    monkeypatch.setenv("HARNESS_PERF_JSON", str(out))
    monkeypatch.setenv("HARNESS_PERF_HISTORY", str(history))
    monkeypatch.setenv("HARNESS_PERF_COMMIT", "c1")
    goals.check_goal("exec", 0.8, 1.0, op="<", mode="enforce")
    goals.write_figures(_session(), 0)
    kept = json.loads(out.read_text())
    assert set(kept) == {"older", "exec"} and kept["exec"]["met"] is True
    (line,) = goals.read_history(history)
    assert (line.commit, line.passed, line.figures["exec"].value) == ("c1", True, 0.8)


def test_a_figure_worse_than_the_last_passing_run_is_named_within_its_goal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    history = tmp_path / "perf_history.jsonl"
    monkeypatch.setenv("HARNESS_PERF_JSON", str(tmp_path / "perf_ratios.json"))
    monkeypatch.setenv("HARNESS_PERF_HISTORY", str(history))
    for commit, passed, value in (("landed", True, 0.50), ("broken", False, 0.30)):
        monkeypatch.setenv("HARNESS_PERF_COMMIT", commit)
        monkeypatch.setattr(goals, "FIGURES", {})
        goals.check_goal("exec", value, 1.0, mode="enforce")
        goals.write_figures(_session(), 0 if passed else 1)
    with open(history, "a") as fh:
        fh.write('{"commit": "torn"')  # a killed writer's last line is passed over
    monkeypatch.setattr(goals, "FIGURES", {})
    monkeypatch.setenv("HARNESS_PERF_COMMIT", "new")
    goals.check_goal("exec", 0.62, 1.0, mode="enforce")  # inside its goal, 1.24x the landed
    session = _session()
    goals.write_figures(session, 0)
    named = [x for x in session.reporter.lines if x.startswith("PERF REGRESSION")]  # type: ignore[attr-defined]
    assert named == ["PERF REGRESSION exec 0.5 -> 0.62x (x1.24 worse than landed, margin 1.15)"]
    assert [h.commit for h in goals.read_history(history)] == ["landed", "broken", "new"]


REMEASURED_SUITE = '''
import pytest
from pathlib import Path

pytestmark = pytest.mark.perf
VALUES = {values!r}


def test_figure(perf_goal):
    count = Path("count.txt")
    n = int(count.read_text()) if count.exists() else 0
    count.write_text(str(n + 1))
    perf_goal("figure", VALUES[n], 1.0)
'''


@pytest.mark.parametrize(("values", "rc", "state"), [
    ([2.0, 1.1], 0, "tolerated"),  # noisy once: measured again, the better counts
    ([2.0, 1.9], 1, "past_margin"),  # past the margin twice: the run fails
    ([0.9, 9.9], 0, "met"),  # met at once: measured once
])
def test_a_perf_session_measures_a_figure_past_its_margin_once_more(
        tmp_path: Path, values: list[float], rc: int, state: str) -> None:
    (tmp_path / "conftest.py").write_text(
        "from tests.perf.conftest import perf_goal, pytest_runtest_protocol, "
        "pytest_sessionfinish  # noqa: F401\n")
    (tmp_path / "test_fig.py").write_text(REMEASURED_SUITE.format(values=values))
    env = run_env() | {"HARNESS_PERF_JSON": str(tmp_path / "perf.json"),
                       "PYTHONPATH": str(REPO_ROOT), "HARNESS_PERF_GOALS": "enforce"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "-p", "no:anyio", "-q", str(tmp_path / "test_fig.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == rc, proc.stdout + proc.stderr
    fig = json.loads((tmp_path / "perf.json").read_text())["figure"]
    assert fig["state"] == state
    measured = int((tmp_path / "count.txt").read_text())
    assert measured == (1 if state == "met" else 2)
    assert ("measuring it once more" in proc.stdout) is (measured == 2)
    assert ("1 passed" if rc == 0 else "1 failed") in proc.stdout
