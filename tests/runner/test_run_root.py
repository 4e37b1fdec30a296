"""Run roots, the manifest written first, the ledger and its per-instance copies."""

from __future__ import annotations

import json

from tests.support.suite import FORK_SERVER


def test_a_distribution_mode_without_workers_runs_the_items_here(suite):
    """``--dist loadgroup`` without ``-n`` (a project's ``addopts`` may carry it) distributes
    nothing: the items run in this process and each gets its row."""
    suite.tasks([{"id": "a", "work": "succeed"}, {"id": "b", "work": "partial", "score": 0.5}])
    run = suite.run("--dist", "loadgroup")
    assert run.rc == 0, run.out
    assert {k: r["score"] for k, r in run.latest.items()} == {"a": 1.0, "b": 0.5}
    assert run.manifest["outcome"] == "completed" and run.manifest["workers"] in (0, 1)


def test_layout_and_manifest(suite, mode):
    suite.tasks([{"id": "a", "work": "succeed"}, {"id": "b", "work": "partial", "score": 0.5}])
    run = suite.run(*mode)
    assert run.rc == 0, run.out
    root = run.root
    for name in ("run_manifest.json", "plan.json", "result_index.jsonl"):
        assert (root / name).is_file(), name
    m = run.manifest
    assert m["schema"] == "harness.run_manifest.v1"
    assert m["outcome"] == "completed" and m["exit_code"] == 0
    assert m["selection"]["count"] == 2 and m["selection"]["resolved"] is True
    assert m["config_fingerprint"].startswith("sha256:")
    assert m["versions"]["pytest"] and m["versions"]["python"]
    assert m["source"]["available"] is True and len(m["source"]["head"]) == 40
    assert m["counts"] == {"completed": 2}
    assert abs(m["mean_score"] - 0.75) < 1e-9
    for iid in ("a", "b"):
        copy = root / "selftest" / iid / "result_index.jsonl"
        rows = [json.loads(x) for x in copy.read_text().splitlines()]
        assert [r["instance_id"] for r in rows] == [iid]
        assert rows[0] == run.latest[iid]
    required = {"schema", "ts_unix", "benchmark", "instance_id", "status", "reason_code",
                "attempt", "worker", "duration_s", "score", "resolved",
                "official_eval_status", "cost_usd", "output_paths", "error", "details"}
    for row in run.rows:
        assert required <= set(row)
    workers = {r["worker"] for r in run.rows}
    assert workers <= ({"main"} if not mode else {"gw0", "gw1"})


def test_manifest_is_on_disk_before_any_instance_runs(suite):
    (suite.path / "conftest.py").write_text(
        'pytest_plugins = ["harness.testing.plugin"]\n'
        "import json, pytest\n"
        "@pytest.fixture(autouse=True)\n"
        "def _check_manifest(harness_instance):\n"
        "    m = json.loads((harness_instance.run_root / 'run_manifest.json').read_text())\n"
        "    assert m['outcome'] == 'running' and m['selection']['resolved']\n"
        "    assert (harness_instance.run_root / 'plan.json').is_file()\n"
    )
    suite.tasks([{"id": "a", "work": "succeed"}, {"id": "b", "work": "succeed"}])
    run = suite.run()
    assert run.rc == 0, run.out


def test_default_root_under_bench_runs_root(suite, tmp_path):
    suite.tasks([{"id": "a", "work": "succeed"}])
    env_root = tmp_path / "elsewhere"
    argv = ["-q", "-p", "no:cacheprovider", str(suite.path / "test_selftest.py"),
            "--run-id", "named-run"]
    env = suite.env() | {"BENCH_RUNS_ROOT": str(env_root)}
    proc = FORK_SERVER.run(argv, suite.path, env, 300)  # pytest, no --run-root, from there
    assert proc.returncode == 0, proc.output
    manifest = json.loads((env_root / "named-run" / "run_manifest.json").read_text())
    assert manifest["run_id"] == "named-run"
    assert manifest["run_root"] == str((env_root / "named-run").resolve())


def test_reused_root_is_refused_and_recorded_beside_it(suite):
    suite.tasks([{"id": "a", "work": "succeed"}])
    first = suite.run()
    before = (first.root / "result_index.jsonl").read_bytes()
    second = suite.run(root=first.root)
    assert second.rc == 2, second.out
    second.result.stdout.fnmatch_lines([
        f"*--run-root {first.root} already exists: run roots are never reused; pass a new"
        f" --run-root, or --resume-from {first.root} to continue that run*"])
    assert (first.root / "result_index.jsonl").read_bytes() == before
    assert json.loads((first.root / "run_manifest.json").read_text())["outcome"] == "completed"
    siblings = [p for p in first.root.parent.iterdir() if "-refused-" in p.name]
    assert len(siblings) == 1
    refusal = json.loads((siblings[0] / "run_manifest.json").read_text())
    assert refusal["outcome"] == "refused" and refusal["exit_code"] == 2
    assert refusal["refusal"]["reason"] == "run_root_exists"


def test_bad_inputs_exit_2_with_one_line(suite, tmp_path):
    suite.tasks([{"id": "a", "work": "succeed"}])
    cases = [
        (["--shard", "3/2"], "*--shard '3/2' is out of range: *"),
        (["--shard", "x"], "*--shard 'x' is malformed: *"),
        (["--run-id", "bad id"], "*--run-id 'bad id' is invalid: *"),
        (["--max-recovery-generations", "many"], "*--max-recovery-generations 'many'*"),
        (["--resume-from", str(tmp_path / "nothing")],
         f"*--resume-from {tmp_path / 'nothing'} is not a run root (no such directory); *"),
    ]
    for args, line in cases:
        run = suite.run(*args)
        assert run.rc == 2, (args, run.out)
        run.result.stdout.fnmatch_lines([line])
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "run_manifest.json").write_text("{not json")
    (corrupt / "result_index.jsonl").write_text("")
    run = suite.run("--resume-from", str(corrupt))
    assert run.rc == 2, run.out
    run.result.stdout.fnmatch_lines([f"*{corrupt / 'run_manifest.json'} is corrupt (*"])
    assert (corrupt / "run_manifest.json").read_text() == "{not json"


def test_refused_resume_still_leaves_a_manifest(suite, tmp_path):
    suite.tasks([{"id": "a", "work": "succeed"}])
    run = suite.run("--resume-from", str(tmp_path / "nothing"))
    assert run.rc == 2
    m = run.manifest
    assert m["outcome"] == "refused" and m["refusal"]["stage"] == "resume"


def test_corrupt_ancestor_ledger_names_the_line(suite):
    suite.tasks([{"id": "a", "work": "succeed"}, {"id": "b", "work": "succeed"}])
    first = suite.run()
    ledger = first.root / "result_index.jsonl"
    lines = ledger.read_text().splitlines(keepends=True)
    ledger.write_text(lines[0] + "garbage\n" + lines[1])
    run = suite.run("--resume-from", str(first.root))
    assert run.rc == 2
    run.result.stdout.fnmatch_lines([f"*{ledger}: line 2 is corrupt (*"])
