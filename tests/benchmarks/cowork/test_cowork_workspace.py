"""The agent's files on the host: the workspace made inert, agent logs read bounded.

No Docker: the instance folders are built on disk the way copy-out leaves them (links kept
as links), with the tricks an adversarial agent plays.
"""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

from benchmarks.cowork_bench import models as m
from benchmarks.cowork_bench.audit import scan
from benchmarks.cowork_bench.classify import classify_instance, usage_records
from benchmarks.cowork_bench.eval_once import tree_fact
from benchmarks.cowork_bench.workspace import SANITISED_NAME, pack_workspace, sanitise_workspace
from harness.core.fsutil import atomic_write_json
from tests.benchmarks.cowork.cowork_helpers import write_agent_phase, write_events

GT = "/workspace/tasks/finalpool/excel-sales-summary/groundtruth_workspace"


def adversarial_workspace(ws: Path, outside: Path) -> None:
    (ws / "sub").mkdir(parents=True)
    (ws / "mine.txt").write_text("mine")
    os.symlink(f"{GT}/Sales_Summary.xlsx", ws / "Sales_Summary.xlsx")  # absolute
    os.symlink("../../tasks/finalpool/excel-sales-summary/groundtruth_workspace", ws / "gt")
    os.symlink(str(outside), ws / "host_secret.txt")  # a host file
    os.symlink("../gt/Sales_Summary.xlsx", ws / "sub" / "chain.xlsx")  # through an escaping link
    os.symlink("sub/../../x", ws / "sneaky")  # climbs out after a descent
    os.symlink("loop_b", ws / "loop_a")
    os.symlink("loop_a", ws / "loop_b")
    os.symlink("mine.txt", ws / "alias.txt")  # stays inside: kept
    os.symlink("../mine.txt", ws / "sub" / "up.txt")  # stays inside: kept
    os.symlink("sub", ws / "subdir_link")  # a directory link inside: kept
    os.symlink("subdir_link/../mine.txt", ws / "via_dir_link.txt")  # inside, through a link
    os.mkfifo(ws / "pipe")


def test_links_leaving_the_workspace_and_fifos_are_removed_inside_links_kept(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("host secret")
    ws = tmp_path / "inst" / "workspace"
    adversarial_workspace(ws, outside)
    record = sanitise_workspace(ws)
    removed = {r.path: r for r in record.removed}
    assert set(removed) == {
        "Sales_Summary.xlsx", "gt", "host_secret.txt", "sub/chain.xlsx", "sneaky",
        "loop_a", "loop_b", "pipe",
    }  # fmt: skip
    assert removed["Sales_Summary.xlsx"].target == f"{GT}/Sales_Summary.xlsx"
    assert removed["Sales_Summary.xlsx"].why == "absolute target"
    assert "climbs out" in removed["gt"].why and "through gt:" in removed["sub/chain.xlsx"].why
    assert removed["pipe"].kind == "fifo"
    assert removed["loop_a"].why.endswith("too many levels of links")
    left = sorted(str(p.relative_to(ws)) for p in ws.rglob("*"))
    assert left == ["alias.txt", "mine.txt", "sub", "sub/up.txt", "subdir_link",
                    "via_dir_link.txt"]  # fmt: skip
    assert record.kept_links == 4
    assert outside.read_text() == "host secret"  # the host file itself untouched


def test_the_eval_pack_never_follows_or_carries_a_link_leaving_the_workspace(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("host secret")
    ws = tmp_path / "workspace"
    adversarial_workspace(ws, outside)
    (ws / "run.sh").write_text("echo hi")
    os.chmod(ws / "run.sh", 0o4755)  # setuid bit: dropped
    with pack_workspace(ws) as data, tarfile.open(fileobj=data) as tar:
        members = {t.name: t for t in tar.getmembers()}
        body = b"".join(
            tar.extractfile(t).read()  # type: ignore[union-attr]
            for t in members.values()
            if t.isreg()
        )
    assert set(members) == {"alias.txt", "mine.txt", "run.sh", "sub", "sub/up.txt",
                            "subdir_link", "via_dir_link.txt"}  # fmt: skip
    assert members["alias.txt"].issym() and members["alias.txt"].linkname == "mine.txt"
    assert members["run.sh"].mode == 0o755 and members["run.sh"].uid == 0
    assert b"host secret" not in body


def test_agent_logs_as_dev_zero_fifo_or_oversized_are_refused_and_recorded(
    tmp_path: Path,
) -> None:
    inst = tmp_path / "inst"
    write_agent_phase(inst)
    write_events(inst, [{"type": "llm_usage", "prompt_tokens": 10, "completion_tokens": 2}])
    logs = inst / m.AGENT_LOG_DIR
    os.symlink("/dev/zero", logs / "tools.jsonl")
    os.symlink("/dev/zero", logs / "agent.log")
    os.mkfifo(logs / "hang.jsonl")
    with open(logs / "huge.jsonl", "wb") as fh:
        fh.truncate(m.AGENT_LOG_MAX_BYTES + 1)  # sparse: large without using the disk
    # the harness's own record, and the agent's forged copy of it
    (inst / m.RUNTIME_USAGE).write_text(
        json.dumps({"type": "llm_usage", "prompt_tokens": 500, "completion_tokens": 50}) + "\n"
    )
    forged = {"type": "llm_usage", "prompt_tokens": 99_999_999, "completion_tokens": 1}
    (logs / m.RUNTIME_USAGE).write_text(json.dumps(forged) + "\n")

    records = usage_records(inst)
    assert [(src, rec["prompt_tokens"]) for src, _, rec in records] == [
        ("runtime_usage.jsonl", 500),
        ("agent/events.jsonl", 10),
    ]
    c = classify_instance(inst)
    assert c.details["paid_activity"] == "observed"
    refused = {r["file"]: r["why"] for r in c.details["agent_logs_refused"]}
    assert set(refused) == {
        "agent/tools.jsonl", "agent/agent.log", "agent/hang.jsonl", "agent/huge.jsonl",
        "agent/runtime_usage.jsonl",
    }  # fmt: skip
    assert "/dev/zero" in refused["agent/tools.jsonl"]
    assert refused["agent/hang.jsonl"] == "not a regular file"
    assert "over the" in refused["agent/huge.jsonl"]
    findings, _ = scan(inst)
    assert {f.source for f in findings if f.reason == "agent_log_refused"} == {
        "agent/tools.jsonl", "agent/agent.log", "agent/hang.jsonl", "agent/huge.jsonl"
    }  # fmt: skip


def test_workspace_digest_never_opens_a_link_or_a_fifo_and_removals_reach_the_row(
    tmp_path: Path,
) -> None:
    inst = tmp_path / "inst"
    write_agent_phase(inst, workspace={"report.txt": "r"})
    ws = inst / m.WORKSPACE_DIR
    os.symlink("/dev/zero", ws / "zero")
    os.mkfifo(ws / "pipe")
    fact = tree_fact(ws)  # returns: neither /dev/zero nor the FIFO is read
    assert fact.state == "present" and fact.files == 1
    atomic_write_json(inst / SANITISED_NAME, sanitise_workspace(ws))
    assert tree_fact(ws).sha256 != fact.sha256  # the removals change the bound workspace
    removed = classify_instance(inst).details["workspace_removed"]
    assert {(r["path"], r["kind"]) for r in removed} == {("zero", "symlink"), ("pipe", "fifo")}
