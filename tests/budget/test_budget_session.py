"""The controller and worker faces built from the plugin's options."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.budget import (
    BudgetRefused,
    BudgetSettings,
    Campaign,
    ControllerBudget,
    WorkerBudget,
    read_monitor,
)
from harness.core.errors import RefusalError
from harness.testing import fake_meter  # noqa: F401  (registers --meter fake-file:PATH)


def _settings(tmp_path: Path, **kw: object) -> BudgetSettings:
    usage = tmp_path / "usage.json"
    if not usage.exists():
        usage.write_text(json.dumps({"usage": 40.0}))
    base: dict[str, object] = {
        "campaign_file": str(tmp_path / "campaign.json"),
        "campaign_budget_usd": 10.0,
        "per_task_reserve_usd": 3.0,
        "budget_reserve_usd": 1.0,
        "meter": f"fake-file:{usage}",
        "meter_blindness_sec": 5.0,
        "meter_poll_sec": 1.0,
        "meter_read_timeout_sec": 1.0,
    }
    base.update(kw)
    return BudgetSettings(**base)  # type: ignore[arg-type]


def test_a_run_reserves_settles_and_is_recorded(tmp_path: Path, run_root: Path) -> None:
    settings = _settings(tmp_path, campaign_budget_usd=9.0)
    assert BudgetSettings.from_json(settings.to_json()) == settings
    controller = ControllerBudget.start(settings, run_id="r1", run_root=run_root)
    assert controller is not None
    assert controller.supervisor.poll() is None

    worker = WorkerBudget(BudgetSettings.from_json(settings.to_json()), "r1", run_root)
    assert worker.reserve("b/1") is not None
    assert worker.reserve("b/2") is not None
    with pytest.raises(BudgetRefused) as refused:
        worker.reserve("b/3")  # 3 + 3 + 3 + 1 reserve > 9
    assert refused.value.reason == "campaign_budget"
    settlement = worker.settle("b/1", 4.5, True)
    assert settlement is not None and settlement.overran
    worker.release("b/2")

    monitor = controller.finish("stopped", 3)
    assert monitor.finished and monitor.campaign_spent_usd == 4.5
    assert read_monitor(run_root).run_spent_usd == 4.5
    state = Campaign.open(settings.campaign_path(run_root)).snapshot()
    assert state.usage_baseline == 40.0 and state.runs[0].overrun_count == 1
    assert state.key_fingerprint.startswith("fake-file:")


def test_refusals_before_any_instance(tmp_path: Path, run_root: Path) -> None:
    with pytest.raises(RefusalError) as no_ceiling:
        ControllerBudget.start(
            _settings(tmp_path, campaign_file=str(tmp_path / "new.json"), campaign_budget_usd=None),
            run_id="r",
            run_root=run_root,
        )
    assert no_ceiling.value.reason == "campaign_budget_missing"
    with pytest.raises(RefusalError) as dead_meter:
        ControllerBudget.start(
            _settings(tmp_path, meter=f"fake-file:{tmp_path / 'absent.json'}"),
            run_id="r",
            run_root=run_root,
        )
    assert dead_meter.value.reason == "budget_meter_unavailable"
    with pytest.raises(RefusalError) as no_key:
        ControllerBudget.start(
            _settings(tmp_path, meter="openrouter"), run_id="r", run_root=run_root, environ={}
        )
    assert no_key.value.reason == "meter_unusable" and "OPENROUTER_API_KEY" in str(no_key.value)


def test_run_budget_alone_gives_the_run_its_own_campaign(tmp_path: Path, run_root: Path) -> None:
    settings = BudgetSettings(budget_usd=2.0, per_task_reserve_usd=1.5,
                              unknown_cost_allowance_usd=1.0)
    controller = ControllerBudget.start(settings, run_id="r", run_root=run_root, pid=os.getpid())
    assert controller is not None and controller.campaign.path == run_root / "campaign.json"
    worker = WorkerBudget(settings, "r", run_root)
    worker.reserve("b/1")
    with pytest.raises(BudgetRefused) as refused:
        worker.reserve("b/2")
    assert refused.value.reason == "campaign_budget"
    worker.settle("b/1", 0.25, True)
    assert controller.finish("completed", 0).campaign_spent_usd == 0.25


def test_no_budget_options_mean_no_reservations_but_the_disk_reserve(run_root: Path) -> None:
    assert ControllerBudget.start(BudgetSettings(), run_id="r", run_root=run_root) is None
    assert WorkerBudget(BudgetSettings(), "r", run_root).reserve("b/1") is None
    worker = WorkerBudget(BudgetSettings(min_free_disk_gb=1e9), "r", run_root)
    with pytest.raises(BudgetRefused) as refused:
        worker.reserve("b/1")
    assert refused.value.reason == "disk_reserve" and "GiB free" in str(refused.value)


def test_reserve_is_explicit_allowance(tmp_path: Path, run_root: Path) -> None:
    """``--budget-reserve-usd`` is one allowance for delayed charges, whatever the
    concurrency; without ``--per-task-reserve-usd`` no per-task amount is held back, so 32
    instances in flight reserve nothing more than the allowance."""
    settings = _settings(tmp_path, campaign_budget_usd=10.0, budget_reserve_usd=4.0,
                         per_task_reserve_usd=None)
    controller = ControllerBudget.start(settings, run_id="r", run_root=run_root)
    assert controller is not None
    worker = WorkerBudget(settings, "r", run_root)
    held = [worker.reserve(f"b/{i}") for i in range(32)]
    assert all(r is not None and r.amount_usd == 0.0 for r in held)
    state = Campaign.open(settings.campaign_path(run_root)).snapshot()
    assert state.outstanding_usd == 0.0
    worker.settle("b/0", 6.0, True)  # spent 6 + allowance 4 = the ceiling: nothing fits
    with pytest.raises(BudgetRefused) as refused:
        worker.reserve("b/next")
    assert refused.value.reason == "campaign_budget"


def test_specification_paid_command_is_admitted(tmp_path: Path, run_root: Path) -> None:
    """The adapter specification's paid command: campaign file, campaign budget 1000, run
    budget 150, reserve 100, no per-task reserve: admitted with its meter, not
    ``per_task_reserve_unknown``."""
    usage = tmp_path / "usage.json"
    usage.write_text(json.dumps({"usage": 0.0}))
    settings = BudgetSettings(campaign_file=str(tmp_path / "campaign.json"),
                              campaign_budget_usd=1000.0, budget_usd=150.0,
                              budget_reserve_usd=100.0, meter=f"fake-file:{usage}")
    controller = ControllerBudget.start(settings, run_id="r", run_root=run_root)
    assert controller is not None
    worker = WorkerBudget(settings, "r", run_root)
    assert worker.reserve("b/1") is not None
    worker.settle("b/1", 150.0, True)  # the run budget is spent: the next one is refused
    with pytest.raises(BudgetRefused) as refused:
        worker.reserve("b/2")
    assert refused.value.reason == "run_budget"
    assert controller.finish("completed", 0).campaign_spent_usd == 150.0


def test_issue23_item6_a_ceiling_without_a_meter_is_refused_naming_the_fix(
    tmp_path: Path, run_root: Path
) -> None:
    """Before: 500 instances of unknown cost were admitted and charged $0 each."""
    paid = BudgetSettings(campaign_file=str(tmp_path / "campaign.json"),
                          campaign_budget_usd=1000.0, budget_usd=150.0, budget_reserve_usd=100.0)
    with pytest.raises(RefusalError) as refused:
        ControllerBudget.start(paid, run_id="r", run_root=run_root)
    assert refused.value.reason == "campaign_unmetered" and refused.value.exit_code == 2
    assert "--meter" in str(refused.value) and "--unknown-cost-allowance-usd" in str(refused.value)
    assert not (tmp_path / "campaign.json").exists()  # nothing written
    own = BudgetSettings(budget_usd=5.0)  # a run budget alone is a ceiling too
    with pytest.raises(RefusalError):
        ControllerBudget.start(own, run_id="r", run_root=run_root)


def test_a_zero_allowance_without_a_meter_is_refused(tmp_path: Path, run_root: Path) -> None:
    """Before: ``--unknown-cost-allowance-usd 0`` passed the unmetered check and every
    instance of unknown cost was charged $0 again."""
    zero = BudgetSettings(campaign_file=str(tmp_path / "campaign.json"),
                          campaign_budget_usd=10.0, unknown_cost_allowance_usd=0.0)
    with pytest.raises(RefusalError) as refused:
        ControllerBudget.start(zero, run_id="r", run_root=run_root)
    assert refused.value.reason == "campaign_unmetered" and refused.value.exit_code == 2
    message = str(refused.value)
    assert "\n" not in message and "--unknown-cost-allowance-usd 0" in message
    assert "above 0" in message and "--meter" in message
    assert not (tmp_path / "campaign.json").exists()
    metered = _settings(tmp_path, unknown_cost_allowance_usd=0.0)  # a meter bounds it
    assert ControllerBudget.start(metered, run_id="r", run_root=run_root) is not None


def test_issue23_item6_unknown_cost_is_charged_at_the_allowance(
    tmp_path: Path, run_root: Path
) -> None:
    settings = BudgetSettings(campaign_file=str(tmp_path / "campaign.json"),
                              campaign_budget_usd=10.0, unknown_cost_allowance_usd=2.0)
    controller = ControllerBudget.start(settings, run_id="r", run_root=run_root)
    assert controller is not None
    worker = WorkerBudget(settings, "r", run_root)
    held = [worker.reserve(f"b/{i}") for i in range(5)]
    assert all(r is not None and r.amount_usd == 2.0 for r in held)  # held while in flight
    with pytest.raises(BudgetRefused):  # 5 x 2 = the ceiling: a sixth would cross it
        worker.reserve("b/5")
    unknown = worker.settle("b/0", None, False)
    assert unknown is not None and unknown.charged_usd == 2.0
    partial = worker.settle("b/1", 3.5, False)  # a larger partial cost is charged in full
    assert partial is not None and partial.charged_usd == 3.5
    known = worker.settle("b/2", 0.25, True)
    assert known is not None and known.charged_usd == 0.25
    for key in ("b/3", "b/4"):
        worker.release(key)
    assert controller.finish("completed", 0).campaign_spent_usd == 5.75
    state = Campaign.open(settings.campaign_path(run_root)).snapshot()
    assert state.runs[-1].unknown_cost_count == 2 and state.spent_usd == 5.75
    assert state.runs[-1].unknown_cost_allowance_usd == 2.0  # recorded with the run


def test_issue23_item6_a_meter_can_be_added_to_a_meterless_campaign(
    tmp_path: Path, run_root: Path
) -> None:
    campaign = str(tmp_path / "campaign.json")
    first = BudgetSettings(campaign_file=campaign, campaign_budget_usd=10.0,
                           unknown_cost_allowance_usd=1.0)
    controller = ControllerBudget.start(first, run_id="r1", run_root=run_root)
    assert controller is not None
    worker = WorkerBudget(first, "r1", run_root)
    worker.reserve("b/1")
    worker.settle("b/1", 1.5, True)
    controller.finish("completed", 0)

    usage = tmp_path / "usage.json"
    usage.write_text(json.dumps({"usage": 50.0}))  # the key's usage, other spend included
    second_root = run_root.parent / "second"
    second_root.mkdir()
    metered = _settings(tmp_path, campaign_file=campaign, campaign_budget_usd=10.0,
                        per_task_reserve_usd=None, budget_reserve_usd=0.0,
                        meter=f"fake-file:{usage}")
    controller = ControllerBudget.start(metered, run_id="r2", run_root=second_root)
    assert controller is not None
    state = Campaign.open(campaign).snapshot()
    assert state.key_fingerprint.startswith("fake-file:") and state.usage_baseline == 50.0
    assert state.spent_usd == 1.5  # the meterless spend is kept, the key's past is not ours
    usage.write_text(json.dumps({"usage": 50.75}))  # spend the meter sees, not settled yet
    assert controller.supervisor.poll() is None
    assert Campaign.open(campaign).snapshot().spent_usd == 2.25
    worker = WorkerBudget(metered, "r2", second_root)
    worker.reserve("b/2")
    worker.settle("b/2", 0.75, True)
    assert controller.finish("completed", 0).campaign_spent_usd == 2.25  # no double count
    # and a run without the meter is told to pass it
    with pytest.raises(RefusalError) as refused:
        ControllerBudget.start(first, run_id="r3", run_root=run_root.parent / "third")
    assert refused.value.reason == "campaign_key_changed" and "--meter" in str(refused.value)


def test_failed_monitor_write_is_reported_and_the_run_goes_on(
    tmp_path: Path, run_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = _settings(tmp_path)
    controller = ControllerBudget.start(settings, run_id="r", run_root=run_root)
    assert controller is not None
    (run_root / "monitor.json").mkdir()  # the monitor cannot be replaced
    assert controller.supervisor.poll() is None  # no stop: a diagnostic, not a failure
    assert "diagnostic_write_failed" in capsys.readouterr().err
    worker = WorkerBudget(settings, "r", run_root)
    assert worker.reserve("b/1") is not None
    worker.settle("b/1", 1.0, True)
    assert controller.finish("completed", 0).campaign_settlement == "recorded"
