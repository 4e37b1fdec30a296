"""What a headline must say about itself: a subset is not the benchmark score (point 15),
and a run without a known clean agent checkout is not reportable (point 10)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.suite import REPO_ROOT, Suite, run_pytest


def _repo(path: Path) -> Path:
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "agent.py").write_text("print('agent')\n")
    subprocess.run([*git, "add", "agent.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "agent"], check=True)
    return path


def _report(root: Path) -> tuple[dict, str]:
    figures = json.loads((root / "report" / "report.json").read_text())
    return figures, (root / "report" / "report.md").read_text()


def test_runs_without_a_clean_agent_repo_are_not_reportable(tmp_path: Path) -> None:
    (tmp_path / "suite").mkdir()
    suite = Suite(tmp_path / "suite")
    suite.tasks([{"id": "a", "work": "succeed"}])
    repo = _repo(tmp_path / "agent")

    bare = suite.run()
    assert bare.rc == 0, bare.out
    assert bare.manifest["reportable"] is False
    [reason] = bare.manifest["not_reportable"]
    assert "--agent-repo" in reason
    figures, markdown = _report(bare.root)
    assert figures["provenance"]["reportable"] is False
    assert "not reportable" in markdown and "--agent-repo" in markdown
    bare.result.stdout.fnmatch_lines(["*= harness run =*", "not reportable: *--agent-repo*"])

    (repo / "agent.py").write_text("print('edited')\n")
    dirty = suite.run("--agent-repo", str(repo), "--allow-dirty-seed")
    assert dirty.rc == 0, dirty.out
    assert dirty.manifest["reportable"] is False
    assert any("dirty" in r for r in dirty.manifest["not_reportable"])
    assert any("dirty" in r for r in _report(dirty.root)[0]["provenance"]["not_reportable"])

    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "agent.py"], check=True)
    clean = suite.run("--agent-repo", str(repo))
    assert clean.rc == 0, clean.out
    assert clean.manifest["reportable"] is True and clean.manifest["not_reportable"] == []
    assert "not reportable" not in _report(clean.root)[1]


def test_programbench_subset_says_it_is_not_the_benchmark_score(tmp_path: Path) -> None:
    run = run_pytest("benchmarks/programbench", tmp_path / "pb", "--dry-run",
                     "--pb-filter", "abishekvashok|ajeetdsouza", timeout=300)
    assert run.rc == 0, run.out
    notice = "2 of 200 tasks: not the benchmark score"
    assert run.manifest["subset_notice"] == notice
    run.result.stdout.fnmatch_lines(["*= harness run =*", notice])  # a line of its own
    figures, markdown = _report(run.root)
    assert figures["provenance"]["subset_notice"] == notice
    assert notice in markdown
    assert notice in (run.root / "report" / "report.html").read_text()


def test_cowork_subset_says_it_is_not_the_benchmark_score(tmp_path: Path) -> None:
    fixture = REPO_ROOT / "tests" / "fixtures" / "cowork_mini"
    run = run_pytest("benchmarks/cowork_bench", tmp_path / "cw", "--cowork-root", str(fixture),
                     "--cowork-allow-dirty-bench", "--dry-run", timeout=300)
    assert run.rc == 0, run.out
    notice = "5 of 496 tasks: not the benchmark score"
    assert run.manifest["subset_notice"] == notice
    run.result.stdout.fnmatch_lines(["*= harness run =*", notice])  # a line of its own
    assert _report(run.root)[0]["provenance"]["subset_notice"] == notice


def test_merged_shards_of_the_whole_benchmark_carry_no_subset_notice(
    tmp_path: Path,
) -> None:
    shards = [run_pytest("benchmarks/programbench", tmp_path / f"s{i}", "--dry-run",
                         "--shard", f"{i}/2", "--no-report", timeout=600) for i in (1, 2)]
    for shard in shards:
        assert shard.rc == 0, shard.out
        count = shard.manifest["selection"]["count"]
        assert shard.manifest["subset_notice"] == \
            f"{count} of 200 tasks: not the benchmark score"
    out = tmp_path / "merged"
    merge = subprocess.run(
        [sys.executable, "-m", "harness.cli", "merge", *(str(s.root) for s in shards),
         "--output", str(out)], capture_output=True, text=True, cwd=REPO_ROOT)
    assert merge.returncode == 0, merge.stdout + merge.stderr
    merged = json.loads((out / "run_manifest.json").read_text())
    assert merged["selection"]["count"] == 200 and merged["subset_notice"] is None
    assert merged["reportable"] is False  # its shards named no --agent-repo
    assert any("--agent-repo" in r for r in merged["not_reportable"])
