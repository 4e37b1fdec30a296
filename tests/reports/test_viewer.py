"""The viewer's instance pages and index (issue 46), without Docker: each agent kind's
records on one timeline, the verdict, attempts side by side, the compared run one link away,
and what an agent writes escaped, capped and redacted."""

from __future__ import annotations

import json
import re

import pytest

from reports.cli import report_command
from reports.write import write_report
from tests.reports.viewer_runs import gateway_events, trajectory, write_tape


def page(paths, key: str) -> str:
    return (paths.output_dir / "instances" / (key.replace("/", "__") + ".html")).read_text()


def timeline(html: str) -> list[tuple[str, str, str]]:
    """(kind, step, status) of each timeline row, as the page shows them."""
    body = html.split('<table id="timeline">', 1)[1].split("</tbody>", 1)[0]
    out = []
    for tr in body.split("<tr ")[1:]:
        cells = re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)
        kind = re.sub(r"<br>.*", "", cells[2], flags=re.S)
        step = re.sub(r"<details>.*", "", cells[3], flags=re.S)
        out.append((kind, re.sub(r"</?code>", "", step), re.sub(r"<br>.*", "", cells[4],
                                                                  flags=re.S)))
    return out


def test_a_mini_swe_trajectory_is_model_calls_and_their_commands_in_order(
        make_run, make_row) -> None:
    traj = trajectory([("ls -la", 0, "a b"), ("make test", 2, "1 failed")])
    row = make_row("pb/t1", output_paths={"trajectory": "pb/t1/traj.json"},
                   details={"agent": "mini-swe-agent"})
    root = make_run("mini", [row])
    (root / "pb" / "t1" / "traj.json").write_text(json.dumps(traj))
    html = page(write_report(root), "pb/t1")
    assert timeline(html) == [
        ("event", "system message", ""), ("event", "user message", ""),
        ("model", "model call", ""), ("command", "ls -la", "exit 0"),
        ("model", "model call", ""), ("command", "make test", "exit 2")]
    assert "$0.0200" in html  # the cost so far after the second call
    assert 'class="k-command failed"' in html  # the failed command is marked


def test_the_gateways_events_take_their_commands_from_the_plan(make_run, make_row) -> None:
    row = make_row("pb/g", output_paths={"gateway_events": "pb/g/gateway_events.jsonl",
                                         "task_body": "pb/g/task_body.json"})
    root = make_run("gw", [row])
    folder = root / "pb" / "g"
    (folder / "gateway_events.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in gateway_events(2)) + "not json\n")
    (folder / "task_body.json").write_text(json.dumps({"metadata": {"reference_plan": {
        "steps": [{"run": "echo one"}, {"run": "echo two"}]}}}))
    rows = timeline(page(write_report(root), "pb/g"))
    assert rows == [("event", "status: running", ""), ("model", "model usage", ""),
                    ("command", "echo one", "exit 0"), ("model", "model usage", ""),
                    ("command", "echo two", "exit 2"), ("event", "status: completed", "")]


def test_a_command_agent_with_the_model_gateway_and_a_tape(make_run, make_row) -> None:
    tape = make_run("tape-holder", [])  # any folder outside the run root
    row = make_row("pb/c", output_paths={
        "agent_command": "pb/c/agent_command.json", "agent_stdout": "pb/c/agent_stdout.log",
        "model_gateway": "pb/c/model_gateway.json"},
        details={"model_record": {"records": str(tape)}})
    root = make_run("cmd", [row])
    folder = root / "pb" / "c"
    (folder / "agent_command.json").write_text(json.dumps(
        {"command": "my-agent --go", "exit_code": 0, "timed_out": False, "wall_s": 3.5}))
    (folder / "agent_stdout.log").write_text("agent says hi\n")
    (folder / "model_gateway.json").write_text(json.dumps(
        {"calls": 3, "prompt_tokens": 150, "completion_tokens": 15, "cost_usd": 0.003,
         "rate_limited": 2, "retries": 1}))
    write_tape(tape, "pb", "c", 3)
    html = page(write_report(root), "pb/c")
    rows = timeline(html)
    assert rows[0] == ("command", "my-agent --go", "exit 0")
    assert rows[1] == ("model", "model gateway: 3 calls", "rate_limited 2, retries 1")
    assert [r[1] for r in rows[2:]] == ["model call 0", "model call 1", "model call 2"]
    assert "agent says hi" in html and "question 2" in html and "answer 2" in html
    assert html.count("<small>0.25 s</small>") == 3  # each call's latency
    assert "HTTP 200, 429 x2, waited 3.0 s" in html  # its pushback


def test_the_verdict_lists_failing_tests_first(make_run, make_row) -> None:
    row = make_row("pb/v", score=0.5, tests_passed=1, tests_total=2,
                   output_paths={"eval_json": "pb/v/t.eval.json"})
    root = make_run("verdict", [row])
    (root / "pb" / "v" / "t.eval.json").write_text(json.dumps({"test_results": [
        {"branch": "b", "name": "a_ok", "status": "passed"},
        {"branch": "b", "name": "z_broken", "status": "failure"}]}))
    html = page(write_report(root), "pb/v")
    tests = html.split('<table id="tests">', 1)[1]
    assert tests.index("b/z_broken") < tests.index("b/a_ok")
    assert "1 failing of 2 tests" in html and "1 of 2 passed" in html


def test_attempts_side_by_side_and_the_compared_run_one_link_away(make_run, make_row) -> None:
    rows = [make_row("pb/t@1", score=1.0, output_paths={"trajectory": "pb/t@1/traj.json"}),
            make_row("pb/t@2", score=0.0, output_paths={"trajectory": "pb/t@2/traj.json"})]
    root = make_run("attempts", rows)
    (root / "pb" / "t@1" / "traj.json").write_text(json.dumps(trajectory(
        [("ls", 0, ""), ("make", 0, "")])))
    (root / "pb" / "t@2" / "traj.json").write_text(json.dumps(trajectory(
        [("ls", 0, ""), ("rm -rf x", 1, "")])))
    base = make_run("base", [make_row("pb/t@1", "base"), make_row("pb/t@2", "base")])
    write_report(base)
    html = page(write_report(root, compare_to=base), "pb/t@2")
    table = html.split('<table id="attempts">', 1)[1].split("</table>", 1)[0]
    assert table.index("pb/t@1") < table.index("pb/t@2")
    assert "command 2" in table  # where the second attempt left the first
    link = re.search(r'id="compare" href="([^"]+)"', html)
    assert link is not None
    target = (root / "report" / "instances" / link.group(1)).resolve()
    assert target == (base / "report" / "instances" / "pb__t@2.html").resolve()


def test_what_the_agent_wrote_is_escaped_capped_and_its_secrets_redacted(
        make_run, make_row, monkeypatch) -> None:
    """Attack: script tags, an event handler, a huge line and invalid UTF-8 in the agent's
    output and its model messages; the provider key in a model message."""
    secret = "sk-test-" + "x" * 24
    monkeypatch.setenv("HARNESS_MODEL_API_KEY", secret)
    evil = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    traj = trajectory([(f"echo '{evil}'", 0, evil + "A" * 2_000_000)],
                      content=f"{evil} my key is {secret}")
    row = make_row("pb/evil", output_paths={"trajectory": "pb/evil/traj.json"})
    root = make_run("evil", [row])
    data = json.dumps(traj).encode().replace(b"my key", b"\xff\xfe my key")
    (root / "pb" / "evil" / "traj.json").write_bytes(data)
    html = page(write_report(root), "pb/evil")
    assert html.count("<script>") == 1  # the page's own, nothing of the agent's
    assert "<img" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert secret not in html and "[harness:redacted-secret]" in html
    assert len(html.encode()) < 100_000  # the 2 MB line capped
    assert "characters left out" in html


def test_the_index_over_runs_links_into_each_run(make_run, make_row, tmp_path) -> None:
    top = tmp_path / "runs"
    top.mkdir()
    roots = []
    for n in range(3):
        root = make_run(f"runs/r{n}", [make_row("pb/a", f"r{n}", score=n / 2),
                                       make_row("pb/b", f"r{n}", score=1.0)])
        write_report(root)
        roots.append(root)
    assert report_command(["--index", str(top)]) == 0
    html = (top / "index.html").read_text()
    assert "3 runs, 2 tasks" in html
    matrix = html.split('<table id="matrix">', 1)[1]
    assert 'href="r2/report/instances/pb__a.html">1.00</a>' in matrix
    assert 'href="r0/report/report.html"' in html


def test_the_index_refuses_a_folder_without_runs_in_one_line(tmp_path, capsys) -> None:
    assert report_command(["--index", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no run root under it" in err and err.count("\n") == 1
    assert report_command(["--index", str(tmp_path), str(tmp_path)]) == 2
    assert not (tmp_path / "index.html").exists()


@pytest.mark.parametrize("kind", ["oracle", "nop"])
def test_an_agent_without_steps_says_so(make_run, make_row, kind) -> None:
    root = make_run(kind, [make_row("pb/o", details={"agent": kind})])
    assert "no step recorded" in page(write_report(root), "pb/o")
