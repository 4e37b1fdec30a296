"""Resume refuses a changed agent seed, runtime or image unless explicitly waived."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest


def _repo(path: Path) -> Path:
    path.mkdir()
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "agent.py").write_text("print('v1')\n")
    subprocess.run([*git, "add", "agent.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "v1"], check=True)
    return path


def _commit(path: Path, text: str) -> None:
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    (path / "agent.py").write_text(text)
    subprocess.run([*git, "commit", "-qam", text], check=True)


def test_resume_refuses_a_different_seed_commit_unless_waived(suite, tmp_path):
    repo = _repo(tmp_path / "agent")
    suite.tasks([{"id": "a", "work": "infra"}, {"id": "b", "work": "succeed"}])
    first = suite.run("--agent-repo", str(repo))
    assert first.rc == 1, first.out
    _commit(repo, "print('v2')\n")
    refused = suite.run("--agent-repo", str(repo), "--resume-from", str(first.root))
    assert refused.rc == 2, refused.out
    assert refused.manifest["refusal"]["reason"] == "seed_changed"
    assert "--allow-seed-change" in refused.manifest["refusal"]["message"]
    unknown = suite.run("--resume-from", str(first.root))  # no --agent-repo: unknown seed
    assert unknown.rc == 2 and unknown.manifest["refusal"]["reason"] == "seed_changed"
    waived = suite.run("--agent-repo", str(repo), "--resume-from", str(first.root),
                       "--allow-seed-change")
    assert waived.rc == 1, waived.out  # a still fails (infra), b is carried
    [record] = waived.manifest["extra"]["resume_provenance"]["waived"]
    assert record["reason"] == "seed_changed" and record["waived_by"] == "--allow-seed-change"


def test_resume_refuses_a_different_runtime_version(suite, tmp_path):
    suite.tasks([{"id": "a", "work": "infra"}])
    first = suite.run()
    manifest_file = first.root / "run_manifest.json"
    data = json.loads(manifest_file.read_text())
    data["extra"]["runtime_attestation"] = {"runtime_version": "6.97.2+3f1c2a9", "ok": True}
    manifest_file.write_text(json.dumps(data))
    refused = suite.run("--resume-from", str(first.root))
    assert refused.rc == 2 and refused.manifest["refusal"]["reason"] == "runtime_changed"
    assert "6.97.2+3f1c2a9" in refused.manifest["refusal"]["message"]
    waived = suite.run("--resume-from", str(first.root), "--allow-runtime-change")
    assert waived.rc == 1, waived.out
    assert waived.manifest["extra"]["resume_provenance"]["waived"][0]["reason"] == \
        "runtime_changed"


@pytest.mark.docker
def test_resume_refuses_a_different_image_digest(suite, tmp_path):
    from harness.sandbox.client import get_client
    from harness.sandbox.images.build import base_recipe, ensure_image

    client = get_client()
    built = ensure_image(base_recipe(), client=client)
    suite.tasks([{"id": "a", "work": "infra"}])
    first = suite.run()
    ledger = first.root / "result_index.jsonl"
    rows = [json.loads(line) for line in ledger.read_text().splitlines()]
    rows[-1]["details"].setdefault("engine", {})["image"] = {"ref": built.tag,
                                                          "id": "sha256:" + "0" * 64}
    ledger.write_text("".join(json.dumps(r) + "\n" for r in rows))
    refused = suite.run("--resume-from", str(first.root))
    assert refused.rc == 2 and refused.manifest["refusal"]["reason"] == "image_changed"
    # The message names both ids (short form, as `docker images` prints them).
    message = refused.manifest["refusal"]["message"]
    assert built.image_id[:19] in message and "sha256:" + "0" * 12 in message
    waived = suite.run("--resume-from", str(first.root), "--allow-image-change")
    assert waived.rc == 1, waived.out
