"""Issue 11, items 1, 2 and 6: the host never runs agent content, copy-out is bounded and
inert, and what the agent's workspace causes is the agent's failure, never infrastructure.

Each test is an adversarial command agent on the ProgramBench fixture, in real Docker,
scored by the real ``programbench eval`` when it gets that far.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from harness.sandbox.transfer import DEFAULT_MAX_COPY_MB
from tests.security.copyout_support import (
    attack,
    disk_use,
    files_containing,
    instance_dir,
    oracle_script,
    row,
    special_entries,
)

pytestmark = pytest.mark.docker


def test_git_fsmonitor_never_runs_on_the_host(tmp_path: Path) -> None:
    marker = tmp_path / "host-marker"
    command = (f"git init -q && git config core.fsmonitor 'touch {marker}; echo' "
               f"&& mkdir -p build && echo obj > build/out.o && echo src > main.c "
               f"&& git add main.c && git -c user.name=a -c user.email=a@a commit -qm c")
    run = attack(tmp_path, "fsmonitor", command)
    r = row(run)
    assert r["outcome"] == "scored" and r["official_eval_status"] == "completed", run.out
    assert not marker.exists()
    info = json.loads((instance_dir(run) / "submission_info.json").read_text())
    # git was asked inside the sandbox: build/ tracks nothing, so it stays out
    assert info["build_dirs_dropped"] == ["build"]
    with tarfile.open(run.root / r["output_paths"]["submission"], "r:gz") as tar:
        assert sorted(tar.getnames()) == ["README.md", "main.c"]


def test_sparse_3g_file_is_the_agents_failure_and_host_disk_stays_bounded(
    tmp_path: Path,
) -> None:
    run = attack(tmp_path, "sparse", f"{oracle_script()} && truncate -s 3G sparse.bin")
    r = row(run)
    assert r["outcome"] == "agent_failed" and r["reason_code"] == "submission_too_large", run.out
    assert r["official_eval_status"] == "not_run" and r["score"] is None
    assert "sparse.bin" in r["error"]
    assert not (instance_dir(run) / "submission.tar.gz").exists()
    assert [p.name for p in instance_dir(run).iterdir() if p.name.startswith(".")] == []
    used = disk_use(run.root)
    print(f"run root disk use after a 3 GB sparse file: {used} bytes")
    assert used < (DEFAULT_MAX_COPY_MB << 20) // 64, used  # nowhere near the file's 3 GB


def test_too_many_files_is_the_agents_failure(tmp_path: Path) -> None:
    run = attack(tmp_path, "many", f"{oracle_script()} && mkdir m && cd m && seq 1 3000 "
                 f"| xargs touch", "--max-copy-out-files", "1000")
    r = row(run)
    assert r["outcome"] == "agent_failed" and r["reason_code"] == "too_many_files", run.out
    assert r["details"]["submission"]["refused"]["max_copy_out_files"] == 1000
    assert not (instance_dir(run) / "submission.tar.gz").exists()


def test_locked_folders_links_fifos_and_setuid_are_scored_normally_and_inert(
    tmp_path: Path,
) -> None:
    """Also a left-behind process that keeps truncating a file (a tar of a shrinking file
    breaks): the agent's processes are killed before the export, so it cannot force one."""
    command = (f"{oracle_script()} && mkdir locked && echo l > locked/f "
               f"&& chmod 000 locked/f locked && ln -s /etc/passwd passwd_link "
               f"&& ln -s /root root_link && mkfifo fifo && cp compile.sh suid.sh "
               f"&& chmod 4755 suid.sh && (setsid sh -c 'while :; do truncate -s 64M churn.bin; "
               f"truncate -s 1M churn.bin; done' </dev/null >/dev/null 2>&1 &)")
    run = attack(tmp_path, "inert", command)
    r = row(run)
    assert r["outcome"] == "scored" and r["score"] == 1.0 and r["resolved"] is True, run.out
    info = json.loads((instance_dir(run) / "submission_info.json").read_text())
    assert info["skipped_special"] == ["fifo"]
    with tarfile.open(run.root / r["output_paths"]["submission"], "r:gz") as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["passwd_link"].issym() and members["passwd_link"].linkname == "/etc/passwd"
    assert members["root_link"].issym() and members["root_link"].size == 0
    assert members["locked"].mode == 0o755 and members["locked/f"].mode == 0o644
    assert members["suid.sh"].mode == 0o755 and "fifo" not in members
    assert "churn.bin" in members
    # nothing of the agent's tree is materialised on the host, so nothing was followed
    assert special_entries(run.root) == []
    assert not (instance_dir(run) / "workspace").exists()
    assert files_containing(run.root, Path("/etc/passwd").read_bytes()) == []
