"""Which records an instance has, and its timeline and verdict read from them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reports.viewer import steps as S

MAX_TESTS = 2000


@dataclass
class Verdict:
    """The verdict as the page shows it: the score and how it came, the tests failing
    first, the judge's own words."""

    lines: list[tuple[str, str]] = field(default_factory=list)  # (label, value)
    tests: list[tuple[str, bool]] = field(default_factory=list)  # (name, passed)
    text: str = ""  # the verifier's output, the checker's tail (capped)
    text_source: str = ""  # which of the two, as recorded


def _path(run_root: Path, folder: Path, rel: str | None) -> Path | None:
    """A file the row names under the run root, reached without following any link (a link
    the agent left in its folder is not read, wherever it points)."""
    if not rel or not isinstance(rel, str):
        return None
    given = Path(rel)
    candidates = [given] if given.is_absolute() else [run_root / given, folder / given]
    for cand in candidates:
        try:
            parts = cand.relative_to(run_root).parts
        except ValueError:
            continue
        if ".." in parts or not parts:
            continue
        here, linked = run_root, False
        for part in parts:
            here = here / part
            if here.is_symlink():
                linked = True
                break
        if not linked and here.is_file():
            return here
    return None


def _plan(body: Path | None) -> list[str]:
    """The reference server's plan in a task body (the gateway's steps' commands)."""
    if body is None:
        return []
    data = S._json(body)
    plan = S._dict(S._dict(S._dict(data).get("metadata")).get("reference_plan"))
    return [S._text(st.get("run") or S._dict(st.get("write")).get("path") or "")
            for st in S._list(plan.get("steps")) if isinstance(st, dict)]


def timeline(run_root: Path, folder: Path, row: dict[str, Any]) -> list[S.Step]:
    """Every step the instance's records give, in the agent's order."""
    outs = row.get("output_paths") or {}
    details = row.get("details") or {}

    def path(name: str) -> Path | None:
        return _path(run_root, folder, outs.get(name))

    out: list[S.Step] = []
    if (traj := path("trajectory")) is not None:
        out += S.mini_swe_steps(traj)
    if (events := path("gateway_events")) is not None:
        out += S.gateway_steps(events, _plan(path("task_body")))
    record = path("agent_command") or (path("agent_record") if traj is None else None)
    if record is not None:
        out += S.command_steps(record, path("agent_stdout"), path("agent_stderr"))
    if (totals := path("model_gateway")) is not None and (step := S.gateway_totals(totals)):
        out.append(step)
    out += _tape(row, details)
    if not out:
        agent = S._dict(details.get("agent")).get("kind") or "the agent"
        out.append(S.Step("event", f"{agent}: no step recorded"
                          + (" (the reference solution applied)" if agent == "oracle" else "")))
    return out


def _tape(row: dict[str, Any], details: dict[str, Any]) -> list[S.Step]:
    record = S._dict(S._dict(details.get("agent")).get("model_record"))
    where = record.get("records")
    if not isinstance(where, str):
        return []
    root = Path(where)
    index = root / "instances" / str(row.get("benchmark")) / f"{row.get('instance_id')}.json"
    return S.tape_steps(index, root / "records") if index.is_file() else []


def verdict(run_root: Path, folder: Path, row: dict[str, Any]) -> Verdict:
    outs = row.get("output_paths") or {}
    details = row.get("details") or {}
    v = Verdict()
    for label, key in (("outcome", "outcome"), ("score", "score"), ("reason", "reason_code"),
                       ("official eval", "official_eval_status")):
        if row.get(key) is not None:
            v.lines.append((label, str(row[key])))
    if row.get("tests_total") is not None:
        v.lines.append(("tests", f"{row.get('tests_passed')} of {row['tests_total']} passed"))
    submission = S._dict(details.get("submission"))
    for key, label in (("scorer_files_removed", "scorer files removed"),
                       ("scorer_files_rewritten", "scorer files rewritten"),
                       ("partial_scored", "partial submission scored")):
        if submission.get(key):
            v.lines.append((label, S.cap(S._text(submission[key]), 500)))
    if row.get("error"):
        v.lines.append(("error", S.cap(str(row["error"]), 2000)))
    v.lines = [(label, S.cap(value, 2000)) for label, value in v.lines]
    if (ev := _path(run_root, folder, outs.get("eval_json"))) is not None:
        v.tests = _eval_tests(ev)
    harbor = S._dict(details.get("harbor"))
    if harbor.get("rewards"):
        v.lines.append(("rewards", S.cap(S._text(harbor["rewards"]), 2000)))
    if (out := _path(run_root, folder, outs.get("verifier_stdout"))) is not None:
        v.text = S.cap(S.read_text(out, 2 * S.TEXT_CAP) or "")
    cowork = S._dict(details.get("eval"))
    if "pass" in cowork or "exit_code" in cowork:
        v.lines.append(("checker", f"pass {cowork.get('pass') is True}, exit "
                                   f"{S._int(cowork.get('exit_code'))}"))
        v.text = v.text or S.cap(S._text(cowork.get("checker_output_tail")))
    if v.text:
        v.text_source = "the verifier's output" if out is not None else "the checker's output"
    return v


def _eval_tests(path: Path) -> list[tuple[str, bool]]:
    """ProgramBench's per-test results, failing first."""
    data = S._dict(S._json(path))
    tests = []
    for t in S._list(data.get("test_results"))[:MAX_TESTS]:
        if isinstance(t, dict):
            name = "/".join(S._text(p) for p in (t.get("branch"), t.get("name")) if p)
            tests.append((S.cap(name, S.TITLE_CAP), t.get("status") == "passed"))
    return sorted(tests, key=lambda t: (t[1], t[0]))
