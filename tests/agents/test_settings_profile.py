"""Issue 43 (2): ``--settings-path`` checks the agent server's profile before any task: the
decisions the benchmark pins, the solve task's disabled tools and every model slot (its form,
and that the running server has the same); a problem is one line naming the key and the
fix, and what was checked is in the manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.agents.gateway.profile import SINGLE_MODEL_TOOLS, ProfileCheck, check_profile
from tests.support.suite import run_pytest

MODEL = "openai/gpt-5.5"
DECISIONS = {"OUROBOROS_TASK_REVIEW_MODE": "required", "OUROBOROS_RUNTIME_MODE": "pro",
             "OUROBOROS_MAX_WORKERS": "4", "OUROBOROS_SAFETY_MODE": "light"}
PROFILE = {**DECISIONS, "OUROBOROS_MAX_WORKERS": 4, "OUROBOROS_MODEL": MODEL,
           "OUROBOROS_MODEL_LIGHT": MODEL, "OPENROUTER_API_KEY": "sk-or-secret-never-kept"}


def _write(tmp_path: Path, settings: dict) -> Path:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(settings))
    return path


def _check(path: Path, live: dict | None = None, *, solve_model: str | None = MODEL,
           disabled: tuple[str, ...] = ("claude_code_edit",)) -> ProfileCheck:
    return check_profile(path, solve_model=solve_model, live=live, decisions=DECISIONS,
                         must_disable=SINGLE_MODEL_TOOLS, disabled_tools=disabled)


def test_the_pinned_profile_passes_and_is_recorded_without_secrets(tmp_path: Path) -> None:
    check = _check(_write(tmp_path, PROFILE), live=PROFILE)
    assert check.ok, check.problems
    assert check.decisions["OUROBOROS_RUNTIME_MODE"] == "pro" and len(check.sha256) == 64
    assert "sk-or-secret" not in check.model_dump_json()


@pytest.mark.parametrize(("change", "named"), [
    ({"OUROBOROS_RUNTIME_MODE": "lite"}, "OUROBOROS_RUNTIME_MODE='lite'"),
    ({"OUROBOROS_TASK_REVIEW_MODE": None}, "OUROBOROS_TASK_REVIEW_MODE=None"),
    ({"OUROBOROS_MAX_WORKERS": 8}, "OUROBOROS_MAX_WORKERS=8"),
    ({"OUROBOROS_MODEL": "openai/gpt-5"}, "--solve-model expects 'openai/gpt-5.5'"),
])
def test_each_decision_is_checked_and_named(tmp_path: Path, change: dict, named: str) -> None:
    check = _check(_write(tmp_path, {**PROFILE, **change}))
    assert len(check.problems) == 1 and named in check.problems[0], check.problems


def test_slots_forms_the_running_server_and_the_solve_task(tmp_path: Path) -> None:
    direct = {k: v for k, v in PROFILE.items() if k != "OPENROUTER_API_KEY"}
    check = _check(_write(tmp_path, direct), solve_model=None)
    assert any("use openai::gpt-5.5" in p for p in check.problems)  # a direct server rewrites
    path = _write(tmp_path, PROFILE)
    live = {**PROFILE, "OUROBOROS_MODEL_LIGHT": "openai/gpt-5"}
    check = _check(path, live=live)
    assert check.problems == [f"OUROBOROS_MODEL_LIGHT='openai/gpt-5' on the running server, "
                              f"'{MODEL}' in {path}: restart the server with this profile"]
    check = _check(path, disabled=())
    assert check.problems == ["the solve task does not disable claude_code_edit; the profile "
                              "measures the single-model harness"]


def test_a_programbench_run_is_refused_on_a_bad_profile_and_records_it(tmp_path: Path) -> None:
    bad = _write(tmp_path, {**PROFILE, "OUROBOROS_SAFETY_MODE": "strict"})
    run = run_pytest("benchmarks/programbench", tmp_path / "r1", "--pb-fixtures", "--dry-run",
                     "--agent", "gateway", "--solve-model", MODEL, "--settings-path", str(bad))
    assert run.rc == 2, run.out
    assert "settings profile: OUROBOROS_SAFETY_MODE='strict'" in run.out
    recorded = run.manifest["extra"]["settings_profile"]
    assert recorded["decisions"]["OUROBOROS_SAFETY_MODE"] == "strict"
    assert run.manifest["refusal"]["reason"] == "settings_profile_mismatch"
    good = _write(tmp_path, PROFILE)
    run = run_pytest("benchmarks/programbench", tmp_path / "r2", "--pb-fixtures", "--dry-run",
                     "--agent", "gateway", "--solve-model", MODEL, "--settings-path", str(good))
    assert run.rc == 0, run.out
    assert run.manifest["extra"]["settings_profile"]["problems"] == []
    unreadable = run_pytest("benchmarks/programbench", tmp_path / "r3", "--pb-fixtures",
                            "--dry-run", "--agent", "gateway", "--settings-path",
                            str(tmp_path / "nope.json"))
    assert unreadable.rc == 2 and "--settings-path" in unreadable.out


def test_a_run_reads_the_servers_settings_once_for_both_checks(tmp_path: Path) -> None:
    """With --solve-model and --settings-path, the running server's settings are read once
    and checked against both; a slot the server runs differently is refused by name."""
    from tests.agents.agents_support import start_server
    from tests.support.suite import Suite

    suite = Suite(tmp_path)
    suite.tasks([{"id": "t", "work": "succeed"}])
    profile = _write(tmp_path, {"OUROBOROS_MODEL": MODEL, "OUROBOROS_MODEL_LIGHT": MODEL,
                                "OPENROUTER_API_KEY": "x"})
    server = start_server(tmp_path / "server", {"settings": {
        "OUROBOROS_MODEL": MODEL, "OUROBOROS_MODEL_LIGHT": "openai/gpt-5",
        "OPENROUTER_API_KEY": "x"}})
    try:
        run = suite.run("--agent", "gateway", "--gateway-url", server.url, "--solve-model",
                        MODEL, "--settings-path", str(profile), "--dry-run")
        reads = server.state()["settings_reads"]
    finally:
        server.stop()
    assert run.rc == 2, run.out
    assert "OUROBOROS_MODEL_LIGHT='openai/gpt-5' on the running server" in run.out
    assert run.manifest["extra"]["target_runtime_actor"]["model"] == MODEL
    assert reads == 1, reads  # one GET /api/settings for both checks
