"""``scripts/ci/artifact.sh``: a shard's run roots as one CI artifact. The agent wrote part
of a run root (its workspace) and is an adversary: a link it planted is stored as a link,
never read through (``actions/upload-artifact`` would upload the target); the chain of roots
travels together and is found again by name on another machine."""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from pathlib import Path

from harness.run.manifest import new_manifest, related_root, write_manifest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "ci" / "artifact.sh"
SECRET = "the-runner-credential-0123456789"


def artifact(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=60)


def run_root(path: Path, run_id: str, ancestors: list[str] | None = None) -> Path:
    """A run root as the runner writes its manifest (the run model reads it)."""
    path.mkdir(parents=True)
    manifest = new_manifest(run_id=run_id, run_root=path, argv=[], dry_run=False, workers=1)
    manifest.resume.ancestors = list(ancestors or [])
    write_manifest(manifest, path)
    return path


def test_an_agents_links_are_packed_as_links_and_the_chain_travels(tmp_path: Path) -> None:
    secret = tmp_path / "credentials"
    secret.write_text(SECRET)
    runs = tmp_path / "machine-a" / "runs"
    first = run_root(runs / "shard-2-7-1", "r1")
    second = run_root(runs / "shard-2-7-2", "r2", [str(first)])
    # a file the run keeps of what the agent left (its own folder, host_workspace, stays
    # behind: see below): a link in it is the agent's
    workspace = second / "programbench" / "t@1" / "collected"
    workspace.mkdir(parents=True)
    (workspace / "leak").symlink_to(secret)
    (workspace / "endless").symlink_to("/dev/urandom")
    (workspace / "main.c").write_text("int main(void) { return 0; }\n")
    run_root(runs / "shard-9-0-1", "unrelated")

    packed = artifact("pack", second, "2")
    assert packed.returncode == 0, packed.stderr
    tar = runs / "shard-2.tar"
    with tarfile.open(tar) as t:
        members = {m.name: m for m in t.getmembers()}
    leak = members["shard-2-7-2/programbench/t@1/collected/leak"]
    assert leak.issym() and leak.linkname == str(secret)
    assert members["shard-2-7-2/programbench/t@1/collected/endless"].issym()
    assert SECRET.encode() not in tar.read_bytes()  # the target was never read
    assert "shard-2-7-1/run_manifest.json" in members  # the ancestor travels with it
    assert not any(n.startswith("shard-9") for n in members)  # nothing else

    other = tmp_path / "machine-c"  # another machine: machine a's folder is gone
    (other / "download").mkdir(parents=True)
    tar.rename(other / "download" / "shard-2.tar")
    shutil.rmtree(tmp_path / "machine-a")
    unpacked = artifact("unpack", other / "download", other / "runs")
    assert unpacked.returncode == 0, unpacked.stderr
    latest = artifact("latest", other / "runs", "2").stdout.strip()
    assert latest == str(other / "runs" / "shard-2-7-2")
    recorded = json.loads((Path(latest) / "run_manifest.json").read_text())
    [ancestor] = recorded["resume"]["ancestors"]
    assert not Path(ancestor).exists()  # machine a's path
    assert related_root(ancestor, Path(latest)) == other / "runs" / "shard-2-7-1"
    assert (other / "runs" / "shard-2-7-2" / "programbench" / "t@1" / "collected"
            / "leak").is_symlink()


def test_a_marker_naming_a_path_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run_root(tmp_path / "elsewhere", "x")
    runs.mkdir()
    (runs / "shard-1.latest").write_text("../elsewhere\n")
    found = artifact("latest", runs, "1")
    assert found.returncode == 2 and found.stdout == ""
    assert "names no run root" in found.stderr


def test_a_root_that_never_started_packs_nothing(tmp_path: Path) -> None:
    done = artifact("pack", tmp_path / "runs" / "shard-1-7-1", "1")
    assert done.returncode == 0 and "nothing to pack" in done.stdout
    assert not (tmp_path / "runs").exists()


def test_a_recorded_root_still_in_place_is_taken_as_recorded(tmp_path: Path) -> None:
    there = run_root(tmp_path / "a" / "shard-1", "r1")
    run_root(tmp_path / "b" / "shard-1", "copy")
    assert related_root(str(there), tmp_path / "b" / "shard-2") == there
    gone = tmp_path / "gone" / "shard-1"
    assert related_root(str(gone), tmp_path / "b" / "shard-2") == tmp_path / "b" / "shard-1"
    assert related_root(str(gone), tmp_path / "c" / "shard-2") == gone  # nothing beside


def test_a_relative_root_packs_and_the_agents_folder_stays_behind(tmp_path: Path) -> None:
    """The workflow names the root relative to the workspace; the agent's own folder (here a
    sparse terabyte) is not packed: nothing after the run reads it."""
    root = run_root(tmp_path / "runs" / "shard-1-7-1", "r1")
    workspace = root / "programbench" / "t@1" / "host_workspace"
    workspace.mkdir(parents=True)
    with (workspace / "sparse").open("wb") as f:
        f.truncate(1 << 40)
    (root / "programbench" / "t@1" / "eval.json").write_text("{}")
    done = subprocess.run(["bash", str(SCRIPT), "pack", "runs/shard-1-7-1", "1"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    tar = tmp_path / "runs" / "shard-1.tar"
    assert tar.stat().st_size < 1 << 20
    with tarfile.open(tar) as t:
        names = t.getnames()
    assert "shard-1-7-1/programbench/t@1/eval.json" in names
    assert not any("host_workspace" in n for n in names)


def test_one_shards_artifact_cannot_reach_another_or_out_of_the_folder(tmp_path: Path) -> None:
    """A tampered tar of shard 1 (a top-level link out of the folder, a forged root and
    marker of shard 2) is unpacked beside shard 2's honest one: shard 2 is untouched and
    nothing lands outside."""
    outside = tmp_path / "outside"
    outside.mkdir()
    download = tmp_path / "download"
    (download / "a").mkdir(parents=True)
    (download / "b").mkdir()
    evil = tmp_path / "evil"
    run_root(evil / "shard-2-9-9", "forged")
    (evil / "shard-2.latest").write_text("shard-2-9-9\n")
    (evil / "shard-2-9-1").symlink_to(outside)
    (evil / "shard-1.latest").write_text("shard-1-9-1\n")
    run_root(evil / "shard-1-9-1", "s1")
    with tarfile.open(download / "a" / "shard-1.tar", "w") as t:
        for name in ("shard-2-9-1", "shard-2-9-9", "shard-2.latest", "shard-1.latest",
                     "shard-1-9-1"):
            t.add(evil / name, arcname=name)
    honest = tmp_path / "honest"
    run_root(honest / "shard-2-9-1", "s2")
    (honest / "shard-2.latest").write_text("shard-2-9-1\n")
    with tarfile.open(download / "b" / "shard-2.tar", "w") as t:
        for name in ("shard-2-9-1", "shard-2.latest"):
            t.add(honest / name, arcname=name)
    runs = tmp_path / "runs"
    done = artifact("unpack", download, runs)
    assert done.returncode == 0, done.stderr
    assert "is not shard 1's: skipped" in done.stderr
    assert list(outside.iterdir()) == []
    assert artifact("latest", runs, "2").stdout.strip() == str(runs / "shard-2-9-1")
    assert json.loads((runs / "shard-2-9-1" / "run_manifest.json").read_text())["run_id"] == "s2"
    assert not (runs / "shard-2-9-9").exists()
    assert artifact("latest", runs, "1").stdout.strip() == str(runs / "shard-1-9-1")
