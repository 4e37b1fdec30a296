"""The viewer's instance pages and index (issue 46), without Docker: each agent kind's
records on one timeline, the verdict, attempts side by side, the compared run one link away,
and what an agent writes escaped, capped and redacted."""

from __future__ import annotations

import json
import re
from urllib.parse import unquote

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
    assert rows == [("event", "agent server event: status: running", ""),
                    ("model", "model usage", ""), ("command", "echo one", "exit 0"),
                    ("model", "model usage", ""), ("command", "echo two", "exit 2"),
                    ("event", "agent server event: status: completed", "")]


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
    target = (root / "report" / "instances" / unquote(link.group(1))).resolve()
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


HOSTILE = {  # what one agent file can hold (issue 46's review): the report is still written
    "nan_tokens": lambda t: t.replace('"prompt_tokens": 1000', '"prompt_tokens": NaN'),
    "huge_number": lambda t: t.replace('"timestamp": 1796000002.0', '"timestamp": 1' + "0" * 400),
    "inf_tokens": lambda t: t.replace('"prompt_tokens": 1000', '"prompt_tokens": 1e999'),
    "actions_not_a_list": lambda t: t.replace('"actions": [', '"actions": 1, "x": ['),
    "nested": lambda t: t.replace('"Next step."', "[" * 5000 + "]" * 5000),
    "lone_surrogate": lambda t: t.replace('"Next step."', '"a\\ud800b"'),
}


@pytest.mark.parametrize("attack", sorted(HOSTILE))
def test_one_hostile_agent_file_never_stops_the_report(make_run, make_row, attack) -> None:
    rows = [make_row("pb/bad", output_paths={"trajectory": "pb/bad/traj.json",
                                             "eval_json": "pb/bad/e.eval.json"}),
            make_row("pb/good", output_paths={"trajectory": "pb/good/traj.json"})]
    root = make_run(f"hostile-{attack}", rows)
    text = json.dumps(trajectory([("ls", 0, "x")]))
    (root / "pb" / "bad" / "traj.json").write_text(HOSTILE[attack](text))
    (root / "pb" / "bad" / "e.eval.json").write_text('{"test_results": 5}')
    (root / "pb" / "good" / "traj.json").write_text(text)
    paths = write_report(root)
    assert paths.html.is_file()
    assert ("command", "ls", "exit 0") in timeline(page(paths, "pb/good"))
    bad = page(paths, "pb/bad")
    assert "$nan" not in bad and "0000000000" not in bad


def test_a_link_or_a_loop_the_agent_left_is_not_read(make_run, make_row) -> None:
    row = make_row("pb/l", output_paths={"gateway_events": "pb/l/events.jsonl",
                                         "trajectory": "pb/l/traj.json"})
    root = make_run("links", [row])
    folder = root / "pb" / "l"
    (folder / "events.jsonl").symlink_to("../../result_index.jsonl")  # other units' rows
    (folder / "traj.json").symlink_to("traj.json")  # a loop
    html = page(write_report(root), "pb/l")
    assert "run-a" not in html.split('<table id="timeline">', 1)[1]
    assert "no step recorded" in html


def test_steps_are_bounded_whatever_one_message_holds(make_run, make_row) -> None:
    from reports.viewer.steps import MAX_STEPS

    traj = trajectory([("ls", 0, "")])
    traj["messages"][2]["extra"]["actions"] = [{"command": f"c{n}"} for n in range(20_000)]
    row = make_row("pb/f", output_paths={"trajectory": "pb/f/traj.json"})
    root = make_run("flood", [row])
    (root / "pb" / "f" / "traj.json").write_text(json.dumps(traj))
    html = page(write_report(root), "pb/f")
    assert MAX_STEPS <= len(timeline(html)) <= MAX_STEPS + 2
    assert f"goes on past {MAX_STEPS} steps" in html


def test_a_tape_record_named_by_many_calls_is_read_once(make_run, make_row, monkeypatch) -> None:
    from reports.viewer import steps

    tape = make_run("tape-many", [])
    write_tape(tape, "pb", "m", 1)
    index = tape / "instances" / "pb" / "m.json"
    data = json.loads(index.read_text())
    data["calls"] = data["calls"] * 300
    index.write_text(json.dumps(data))
    reads: list[str] = []
    original = steps._json

    def counted(path, *args):
        reads.append(str(path))
        return original(path, *args)

    monkeypatch.setattr(steps, "_json", counted)
    root = make_run("many-calls", [make_row("pb/m", details={
        "model_record": {"records": str(tape)}})])
    assert len(timeline(page(write_report(root), "pb/m"))) == 300
    assert sum(1 for r in reads if "/records/" in r) == 1


def test_a_secret_with_a_quote_or_an_ampersand_is_redacted_before_it_is_escaped(
        make_run, make_row, monkeypatch) -> None:
    monkeypatch.setenv("DB_PASSWORD", 'hunter2"pa55&<word>')
    traj = trajectory([("env", 0, 'DB_PASSWORD=hunter2"pa55&<word>')])
    row = make_row("pb/s", output_paths={"trajectory": "pb/s/traj.json"})
    root = make_run("secret", [row], config={"agent.env": ["DB_PASSWORD"]})
    (root / "pb" / "s" / "traj.json").write_text(json.dumps(traj))
    html = page(write_report(root), "pb/s")
    assert "hunter2" not in html and "[harness:redacted-secret]" in html


def test_a_run_folder_named_like_a_url_scheme_stays_a_path_in_the_index(
        make_run, make_row, tmp_path) -> None:
    top = tmp_path / "runs"
    top.mkdir()
    write_report(make_run("runs/javascript:alert(1)", [make_row("pb/a", "r0", score=1.0)]))
    assert report_command(["--index", str(top)]) == 0
    html = (top / "index.html").read_text()
    assert 'href="javascript:' not in html and 'href="javascript%3Aalert' in html
