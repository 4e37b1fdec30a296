"""The perf suite's goal checker: a noisy ratio warns in CI's mode, a broken one fails."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.perf import goals


@pytest.fixture(autouse=True)
def _fresh_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(goals, "FIGURES", {})


def test_a_ratio_past_its_goal_fails_when_goals_are_enforced() -> None:
    with pytest.raises(pytest.fail.Exception, match=r"eval = 1\.640x \(goal <= 1\.05x\)"):
        goals.check_goal("eval", 1.64, 1.05, mode="enforce")


def test_a_ratio_past_its_goal_only_warns_in_ci_mode(capsys: pytest.CaptureFixture[str]) -> None:
    assert goals.check_goal("eval", 1.64, 1.05, mode="warn") is False
    assert "PERF WARNING eval = 1.640x (goal <= 1.05x)" in capsys.readouterr().out
    assert goals.FIGURES["eval"] == {"value": 1.64, "goal": 1.05, "op": "<=", "unit": "x",
                                     "met": False}


@pytest.mark.parametrize("broken", [0.0, -1.0, float("nan"), float("inf")])
def test_a_broken_measurement_fails_in_either_mode(broken: float) -> None:
    with pytest.raises(pytest.fail.Exception, match="broken measurement"):
        goals.check_goal("eval", broken, 1.05, mode="warn")


def test_an_unknown_mode_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_PERF_GOALS", "lenient")
    with pytest.raises(pytest.UsageError, match="HARNESS_PERF_GOALS='lenient'"):
        goals.check_goal("eval", 1.0, 1.05)


def test_the_figures_are_merged_into_the_json_file(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "perf_ratios.json"
    out.write_text(json.dumps({"older": {"value": 2.0, "goal": 3, "op": "<", "unit": "s",
                                         "met": True}}))
    monkeypatch.setenv("HARNESS_PERF_JSON", str(out))
    goals.check_goal("exec", 0.8, 1.0, op="<", mode="warn")
    session = SimpleNamespace(config=SimpleNamespace(
        pluginmanager=SimpleNamespace(get_plugin=lambda name: None)))
    goals.write_figures(session)  # type: ignore[arg-type]
    kept = json.loads(out.read_text())
    assert set(kept) == {"older", "exec"}
    assert kept["exec"]["met"] is True
