"""The report of a run with repeated attempts (issue 24): the attempts section (mean with its
interval, pass@k, unstable tasks) in Markdown, HTML, JSON and on the terminal; compare
paired by task; the models each row called and the flag on a row that named a model not
allowed or had refused calls. A K=1 run's report does not change."""

from __future__ import annotations

import json
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from harness.core.models import ModelCalls, TaskRow
from harness.run.ledger import LedgerRead
from harness.run.samples import sample_stats
from reports.build import compare_runs
from reports.cli import report_command
from reports.figures import ReportFigures
from reports.run import load_run
from reports.stats import bootstrap_mean_ci, mcnemar_exact_p
from reports.write import write_report
from tests.reports.attempt_runs import INFRA, attempt_row, attempt_rows, scored
from tests.reports.report_runs import row

MakeRun = Callable[..., Path]
B = "programbench"
TASKS = {
    "alpha": [1.0, 1.0, 1.0],
    "beta": [0.2, 0.9, 0.5],  # range 0.7: unstable
    "gamma": [1.0, 0.0, 1.0],  # solved 2 of 3: unstable
    "delta": [0.4, 0.45, 0.5],
}


def k3_rows() -> list[TaskRow]:
    rows = attempt_rows(TASKS)
    rows.append(attempt_row(B, "eps", 1, **scored(0.3)))
    rows.append(attempt_row(B, "eps", 2, **INFRA))
    return rows


def k3_selection(rows: list[TaskRow]) -> list[str]:
    return [r.key for r in rows] + [f"{B}/eps@3"]  # attempt 3 at eps wrote no row


class Tables(HTMLParser):
    """The text of each table's cells by table id, and each section's id."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.sections: list[str] = []
        self.flagged_rows = 0
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section" and a.get("id"):
            self.sections.append(str(a["id"]))
        if tag == "table" and a.get("id"):
            self._table = str(a["id"])
            self.tables[self._table] = []
        if tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
            if "flagged" in (a.get("class") or ""):
                self.flagged_rows += 1
        if tag in ("td", "th") and self._table is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        if tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def parse(html: str) -> Tables:
    t = Tables()
    t.feed(html)
    return t


def test_repeated_run_report_has_the_attempts_section(make_run: MakeRun) -> None:
    rows = k3_rows()
    root = make_run("k3", rows, k3_selection(rows))
    paths = write_report(root, resamples=2000, seed=5)
    figures = ReportFigures.model_validate_json(paths.figures.read_text())
    expected = sample_stats(LedgerRead(rows).latest, k3_selection(rows), resamples=2000, seed=5)
    assert figures.samples == expected
    s = figures.samples
    assert s is not None and s.k == 3 and s.tasks == 5 and s.attempts == 13
    assert s.unstable == [f"{B}/beta", f"{B}/gamma"]
    assert s.missing_by_status == {"infra_failed": 1, "no_row": 1}
    # the headline (every selected attempt, missing 0) is the samples' missing-zero mean
    # here, each task having 3 attempts selected
    assert figures.headline.raw.mean_score == pytest.approx(s.mean_score_missing_zero)
    assert figures.headline.selected == 15
    by_key = {r.key: r for r in figures.instances}
    assert by_key[f"{B}/eps@3"].task == f"{B}/eps" and by_key[f"{B}/eps@3"].sample == 3
    assert all(r.task is not None for r in figures.instances)

    md = paths.markdown.read_text()
    assert "### Repeated attempts" in md
    assert "- Attempts: K=3 per task; 5 task(s), 15 selected attempt(s), 13 counted" in md
    assert "2 missing (infra_failed 1, no_row 1), not counted" in md
    ci = s.mean_interval
    assert ci is not None
    assert f"- Mean score: {s.mean_score:.3f}, 95% CI [{ci.low:.3f}, {ci.high:.3f}]" in md
    assert "(bootstrap over 5 tasks with their 13 attempts; 2000 resamples, seed 5)" in md
    assert "| k | pass@k | Tasks | Attempts | Tasks with fewer than k attempts |" in md
    p3 = s.pass_at_k(3)
    assert p3 is not None and p3.tasks == 4 and p3.tasks_short == 1
    assert f"| 3 | {100 * (p3.value or 0):.1f}% | 4 | 12 | 1 |" in md
    assert "#### Unstable tasks (2)" in md
    assert "| programbench/beta | 3/3 | 0.20 0.90 0.50 | 0.200 | 0.900 | 0.533 | 0/3 |" in md
    assert "| programbench/gamma | 3/3 | 1.00 0.00 1.00 |" in md and "solved 2 of 3" in md

    html = parse(paths.html.read_text())
    assert html.sections[:2] == ["headline", "attempts"]
    summary = dict(html.tables["attempts-summary"][i][:2] for i in range(4))  # type: ignore[misc]
    assert summary["Mean score"].startswith(f"{s.mean_score:.3f}, 95% CI")
    assert [r[0] for r in html.tables["pass-at-k"][1:]] == ["1", "2", "3"]
    unstable = html.tables["unstable-table"][1:]
    assert [r[0] for r in unstable] == [f"{B}/beta", f"{B}/gamma"]
    assert unstable[0][-1] == "score range 0.70 > 0.5"


def test_k1_report_has_no_attempts_section_and_no_new_keys(make_run: MakeRun) -> None:
    rows = [row(f"{B}/a", score=1.0, resolved=True), row(f"{B}/b", score=0.25)]
    paths = write_report(make_run("k1", rows), resamples=200)
    data = json.loads(paths.figures.read_text())
    assert "samples" not in data and "models" not in data
    for inst in data["instances"]:
        assert not {"task", "sample", "models", "model_flag"} & set(inst)
    assert "Repeated attempts" not in paths.markdown.read_text()
    html = parse(paths.html.read_text())
    assert "attempts" not in html.sections and "models" not in html.sections
    assert "Models" not in html.tables["instances-table"][0]
    figures = ReportFigures.model_validate_json(paths.figures.read_text())
    assert figures.samples is None and figures.headline.raw.mean_score == pytest.approx(0.625)


def test_report_command_prints_the_attempts_section(
    make_run: MakeRun, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = k3_rows()
    root = make_run("k3", rows, k3_selection(rows))
    assert report_command([str(root), "--resamples", "300"]) == 0
    out = capsys.readouterr().out
    assert "repeated attempts" in out and "pass@k" in out and "unstable tasks (2)" in out
    k1 = make_run("k1", [row(f"{B}/a", score=1.0)])
    assert report_command([str(k1), "--resamples", "300"]) == 0
    assert capsys.readouterr().out.count("\n") == 1  # the one "wrote ..." line, as before


# --- models per instance and the flag ------------------------------------------------------


def _calls(model: str, calls: int, **kw: Any) -> ModelCalls:
    return ModelCalls(
        model=model,
        source="model_proxy",
        calls=calls,
        prompt_tokens=100 * calls,
        completion_tokens=10 * calls,
        cost_usd=0.01 * calls,
        **kw,
    )


def test_models_per_instance_and_flagged_rows(make_run: MakeRun) -> None:
    rows = [
        row(f"{B}/clean", score=1.0, models=[_calls("model-a", 12)]),
        row(
            f"{B}/swap",
            score=0.5,
            models=[
                _calls("model-a", 3),
                _calls("model-b", 2, allowed=False),  # a source that forwarded it anyway
                # the gateway's record of calls it refused (403 model_not_allowed)
                ModelCalls(model="model-c", source="model_proxy", refused=3, allowed=False),
                ModelCalls(model="model-a", source="model_proxy", refused=1, allowed=False),
            ],
        ),
        row(f"{B}/refused", score=0.0, models=[_calls("model-a", 4, refused=2)]),
        row(f"{B}/old", score=0.3),  # recorded no models
    ]
    paths = write_report(make_run("models", rows), resamples=200)
    figures = ReportFigures.model_validate_json(paths.figures.read_text())
    flags = {r.instance_id: r.model_flag for r in figures.instances}
    assert flags == {
        "clean": None,
        "swap": "not allowed: model-b (model_proxy, 2 call(s)); "
        "not allowed: model-c (model_proxy, 3 refused); "
        "not allowed: model-a (model_proxy, 1 refused)",
        "refused": "refused calls: model-a (model_proxy, 4 call(s), 2 refused)",
        "old": None,
    }
    use = figures.models
    assert use is not None and use.rows_recorded == 3 and use.rows_unrecorded == 1
    totals = {t.model: t for t in use.totals if t.allowed or t.model != "model-a"}
    [refused_a] = [t for t in use.totals if t.model == "model-a" and not t.allowed]
    assert refused_a.refused == 1 and refused_a.calls == 0 and refused_a.instances == 1
    assert totals["model-a"].calls == 19 and totals["model-a"].instances == 3
    assert totals["model-a"].refused == 2 and totals["model-a"].allowed
    assert totals["model-b"].calls == 2 and not totals["model-b"].allowed
    assert totals["model-c"].refused == 3 and totals["model-c"].cost_usd is None
    assert totals["model-c"].cost_unknown_rows == 1 and totals["model-c"].prompt_tokens is None
    assert totals["model-a"].prompt_tokens == 1900
    assert totals["model-a"].cost_usd == pytest.approx(0.19)
    assert [f.key for f in use.flagged] == [f"{B}/refused", f"{B}/swap"]

    md = paths.markdown.read_text()
    assert "### Models" in md and "**Flagged rows (2):**" in md
    assert "| programbench/swap | not allowed: model-b (model_proxy, 2 call(s)); not allowed" in md
    assert "| model-b | model_proxy | 1 | 2 | 0 | 200 | 20 | $0.02 | NO |" in md

    html = parse(paths.html.read_text())
    assert "models" in html.sections
    header = html.tables["instances-table"][0]
    assert header[-1] == "Models"
    cells = {r[1]: r[-1] for r in html.tables["instances-table"][1:]}
    assert cells["clean"] == "model-a: 12 call(s) (model_proxy)"
    assert cells["swap"].startswith("⚠ model-a: 3 call(s) (model_proxy); model-b: 2 call(s)")
    assert cells["refused"].startswith("⚠ ") and cells["old"] == ""
    assert [r[0] for r in html.tables["flagged-table"][1:]] == [f"{B}/refused", f"{B}/swap"]
    assert "; model-c: 0 call(s), 3 refused (model_proxy);" in cells["swap"]
    assert html.flagged_rows == 5  # 3 totals not allowed (a, b, c), the 2 flagged instances
    data = json.loads(
        paths.html.read_text()
        .split('<script type="application/json" id="instances-table-data">')[1]
        .split("</script>")[0]
    )
    assert data["columns"][-1]["label"] == "Models"  # the pages report.js renders


# --- compare, paired by task -------------------------------------------------------------


def test_compare_pairs_by_task_and_averages_over_attempts(make_run: MakeRun) -> None:
    a_rows = attempt_rows(
        {"t1": [1.0, 0.0, 1.0], "t2": [0.2, 0.4, 0.6], "t3": [0.0, 0.0, 0.0]}, run_id="A"
    )
    a_rows.append(attempt_row(B, "t4", 1, "A", **scored(1.0)))
    a_rows.append(attempt_row(B, "t4", 2, "A", **INFRA))
    b_rows = [
        row(f"{B}/t1", "B", score=1.0, resolved=True),
        row(f"{B}/t2", "B", score=0.1),
        row(f"{B}/t3", "B", score=1.0, resolved=True),
        row(f"{B}/t4", "B", score=0.5),
        row(f"{B}/only-b", "B", score=0.5),
    ]
    a = load_run(make_run("a", a_rows))
    b = load_run(make_run("b", b_rows))
    cmp = compare_runs(a, b, resamples=3000, seed=2)
    assert cmp.shared == 4 and cmp.only_b == [f"{B}/only-b"] and cmp.only_a == []
    by = {c.key: c for c in cmp.changes}
    means_a = {"t1": 2 / 3, "t2": 0.4, "t3": 0.0, "t4": 0.5}  # t4: the infra attempt counts 0
    means_b = {"t1": 1.0, "t2": 0.1, "t3": 1.0, "t4": 0.5}
    for t in means_a:
        c = by[f"{B}/{t}"]
        assert c.score_a == pytest.approx(means_a[t]) and c.score_b == pytest.approx(means_b[t])
        assert c.attempts_b == 1
    assert by[f"{B}/t1"].attempts_a == 3 and by[f"{B}/t4"].attempts_a == 2
    assert by[f"{B}/t1"].resolved_rate_a == pytest.approx(2 / 3)
    assert by[f"{B}/t1"].resolved_a  # 2 of 3: a majority
    assert not by[f"{B}/t4"].resolved_a  # 1 of 2: not more than half
    assert by[f"{B}/t1"].status_a == "completed 3"
    assert by[f"{B}/t4"].status_a == "completed 1, infra_failed 1" and by[f"{B}/t4"].infra_a
    assert cmp.mean_a == pytest.approx(sum(means_a.values()) / 4)
    diffs = [means_b[t] - means_a[t] for t in sorted(means_a)]
    ci = bootstrap_mean_ci(diffs, resamples=3000, seed=2)
    assert ci is not None
    assert (cmp.bootstrap.low, cmp.bootstrap.high) == (pytest.approx(ci[0]), pytest.approx(ci[1]))
    # McNemar on majority-resolved tasks: A resolves t1 only, B t1 and t3
    assert (cmp.mcnemar.b, cmp.mcnemar.c) == (0, 1)
    assert cmp.mcnemar.exact_p == mcnemar_exact_p(0, 1)
    assert (cmp.attempts_per_task_a, cmp.attempts_per_task_b) == (3, 1)
    assert (cmp.shared_attempts_a, cmp.shared_attempts_b) == (11, 4)
    assert any("repeated attempts (up to 3 per task in A, 1 in B)" in w for w in cmp.warnings)
    assert any("1 infra_failed attempt(s) in 1 of the shared tasks" in w for w in cmp.warnings)


def test_compare_of_k1_runs_keeps_its_json(make_run: MakeRun) -> None:
    a = load_run(make_run("a", [row(f"{B}/x", "A", score=0.5), row(f"{B}/y", "A", score=1.0)]))
    b = load_run(make_run("b", [row(f"{B}/x", "B", score=0.7), row(f"{B}/y", "B", score=1.0)]))
    data = json.loads(compare_runs(a, b, resamples=100).model_dump_json(by_alias=True))
    assert not {"attempts_per_task_a", "shared_attempts_a"} & set(data)
    assert all(not {"attempts_a", "resolved_rate_a"} & set(c) for c in data["changes"])
    assert [c["status_a"] for c in data["changes"]] == ["completed", "completed"]
    assert not any("repeated" in w for w in data["warnings"])


def test_report_with_compare_shows_attempts(make_run: MakeRun) -> None:
    rows = k3_rows()
    base = make_run("base", [row(f"{B}/{t}", "base", score=0.5) for t in [*TASKS, "eps"]])
    root = make_run("k3", rows, k3_selection(rows))
    paths = write_report(root, compare_to=base, resamples=300)
    md = paths.markdown.read_text()
    assert "- Attempts: up to 1 per task in A and 3 in B; 5 and 15 attempts on the 5" in md
    html = parse(paths.html.read_text())
    assert html.sections[:3] == ["headline", "attempts", "compare"]
