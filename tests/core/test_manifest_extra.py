"""``run_manifest.json`` ``extra`` is typed (ManifestExtra) and still the file older runs wrote:
a manifest is read and written back unchanged, whatever sections it has, including sections
this version does not model or cannot read; a new section never appears as ``null``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from harness.core.models import HostLoad, ManifestExtra, SelectionChange
from harness.run import manifest as mf
from harness.run.resume import grew

# Every section a run of the previous (untyped) version wrote, in the order it wrote them,
# with the values' own JSON types (ints stay ints, explicit nulls stay null).
OLD_EXTRA: dict[str, Any] = {
    "host_load": {"cpus": 2, "start": [5.5546875, 6.6, 6.63], "end": [1.0, 2.5, 3.0]},
    "refused_run_root": "/runs/r0",
    "agent": {"kind": "gateway", "gateway_url": "http://127.0.0.1:9", "solve_model": None,
              "command": None, "env_names": ["HARNESS_KEY"]},
    "agent_source": {"schema": "repo_provenance.v1", "repo_dir": "/a", "head": "ab" * 20,
                     "dirty": False, "version": None},
    "seed_gate": {"require_clean": True, "ok": True, "reason": None},
    "target_runtime_actor": {"model": "m", "found": True},
    "runtime_attestation": {"runtime_version": "6.97.2", "ok": True, "overridden": False},
    "engines": [{"index": 0, "url": "unix:///var/run/docker.sock", "reachable": True,
                 "error": None}],
    "budget": {"enabled": True, "dry_run_untouched": False, "campaign_file": "/c.json",
               "budget_usd": 5, "per_task_reserve_usd": 0.25,
               "unknown_cost_allowance_usd": None, "budget_reserve_usd": 0.0,
               "meter": "file", "meter_blindness_sec": 30.0, "min_free_disk_gb": None,
               "final": {"spent_usd": 1.5, "state": "finished"}},
    "image_policy": {"pull": "missing", "mirror": None, "digest_file": None, "pins": 0,
                     "allow_image_change": True},
    "image_changes_allowed": ["pb/x (image id sha256:1 -> sha256:2)"],
    "sandbox_runtime": {"name": "runsc", "path": "/usr/bin/runsc", "args": []},
    "sweeps": {"lease": {"lease_id": "l", "ttl_s": 60, "keep": False, "at_unix": 1.5},
               "startup": {"stale_runs_swept": []},
               "worker_crashes": [{"worker": "gw1", "removed": ["c1"]}],
               "lease_release_error": "OSError: gone",
               "final": {"removed": [], "kept_for_reattach": ["s1"]}},
    "resume_provenance": {"waived": [{"reason": "seed_changed", "ancestor": "/runs/r1",
                                      "detail": "d", "waived_by": "--allow-seed-change"}]},
    "benchmark_sizes": {"programbench": 200, "selftest": None},
    "resume_selection": {"ancestor_selected": 12, "selected": 200, "added": 188,
                         "left_out": 0},
    "programbench": {"programbench_version": "1.2.5", "eval": "batch", "shuffle": False,
                     "shuffle_seed": None, "cpus": 4.0, "docker_cpus": 2,
                     "task_timeout_sec": 3600},
    "official_summaries": ["programbench_info.txt"],
    "official_parity": {"checked": 3, "ok": True, "mismatches": []},
    "cowork": {"run_images": {"runtime": "sha256:abc"}, "images": {}},
    "not_reportable_by_benchmark": {"cowork": ["dirty bench checkout"]},
    "finish_errors": ["RuntimeError: scoring failed"],
    "engine_sweeps": [{"worker": "gw0", "engines": {"unix:///x": ["c2"]}}],
    "engine_final": {"unix:///x": []},
    "engines_lost": ["tcp://10.0.0.2:2375"],
    "secret_scan": {"hits": 0, "instances_with_hits": []},
    "diagnostic_write_failed": {"failed_writes": 2, "ledger_rows_unwritten": 0},
    "merged_from": ["/runs/s1", "/runs/s2"],
    "merged_not_reportable": [],
    "a_later_version_section": {"anything": [1, None, "x"]},
}


def write_old(root: Path, extra: dict[str, Any]) -> str:
    """A finished run's manifest as the previous version wrote it (``extra`` a plain dict)."""
    m = mf.new_manifest(run_id="r1", run_root=root, argv=["pytest"], dry_run=False,
                        workers=0)
    data = json.loads(m.model_dump_json(by_alias=True))
    data["extra"] = extra
    text = json.dumps(data, indent=2) + "\n"
    root.mkdir(parents=True, exist_ok=True)
    mf.manifest_path(root).write_text(text)
    return text


def rewritten(root: Path) -> str:
    """Read the manifest and write it back as the runner does (reportability included)."""
    m = mf.read_manifest(root)
    path = mf.write_manifest(m)
    return path.read_text()


def test_an_old_manifest_with_every_known_section_is_written_back_unchanged(tmp_path):
    write_old(tmp_path / "r1", OLD_EXTRA)
    new = rewritten(tmp_path / "r1")
    assert json.loads(new)["extra"] == OLD_EXTRA
    # the whole "extra" object byte for byte, key order included
    assert json.dumps(json.loads(new)["extra"]) == json.dumps(OLD_EXTRA)
    m = mf.read_manifest(tmp_path / "r1")
    assert m.extra.budget is not None and m.extra.budget.budget_usd == 5
    assert isinstance(m.extra.budget.budget_usd, int)  # 5 stays 5, not 5.0
    assert m.extra.resume_selection is not None and m.extra.resume_selection.added == 188
    assert m.extra.section("cowork") == OLD_EXTRA["cowork"]


@pytest.mark.parametrize("keys", [[], ["host_load"], ["budget", "sweeps"],
                                  ["cowork", "programbench", "engines_lost"]])
def test_any_subset_of_sections_round_trips_and_adds_no_null(tmp_path, keys):
    extra = {k: OLD_EXTRA[k] for k in keys}
    write_old(tmp_path / "r1", extra)
    assert json.loads(rewritten(tmp_path / "r1"))["extra"] == extra


def test_a_section_of_another_shape_is_kept_verbatim_and_reads_as_absent(tmp_path):
    """A section written by a version with another shape must not make the run unreadable
    (resume and reports read old runs): it reads as absent and is written back as it was."""
    odd = {"host_load": {"cpus": 2},
           "resume_selection": {"added": "many"},
           "official_summaries": "programbench_info.txt",
           "budget": {"enabled": "yes", "meter": "file"},
           "benchmark_sizes": {"selftest": 3}}
    write_old(tmp_path / "r1", odd)
    m = mf.read_manifest(tmp_path / "r1")
    assert m.extra.official_summaries is None
    assert "official_summaries" in m.extra.unread
    assert m.extra.resume_selection is not None and m.extra.resume_selection.added is None
    assert grew(m)  # unknown counts as grown, as before
    assert m.extra.budget is not None and m.extra.budget.meter == "file"
    assert m.extra.budget.enabled is None  # "yes" is not read as True
    assert json.loads(rewritten(tmp_path / "r1"))["extra"] == odd


def test_a_new_manifest_writes_only_the_sections_set(tmp_path):
    m = mf.new_manifest(run_id="r1", run_root=tmp_path / "r1", argv=[], dry_run=True,
                        workers=0)
    (tmp_path / "r1").mkdir()
    m.extra.resume_selection = SelectionChange(ancestor_selected=1, selected=1, added=0,
                                               left_out=0)
    m.extra.finish_errors = ["x"]
    mf.finalize(m, outcome="completed", exit_code=0)
    extra = json.loads(mf.manifest_path(tmp_path / "r1").read_text())["extra"]
    assert list(extra) == ["host_load", "resume_selection", "finish_errors"]
    assert set(extra["host_load"]) == {"cpus", "start", "end"}
    assert None not in extra.values()


class Record(BaseModel):
    version: str
    seed: int | None = None


def test_benchmark_sections_are_written_and_read_through_their_model():
    extra = ManifestExtra(host_load=HostLoad(cpus=1))
    extra.set_section("mybench", Record(version="1"))
    assert extra.model_dump(mode="json") == {"host_load": {"cpus": 1},
                                             "mybench": {"version": "1", "seed": None}}
    assert extra.get_section("mybench", Record) == Record(version="1")
    assert extra.get_section("absent", Record) is None
    extra.set_section("mybench", {"version": 2})  # not a Record any more: not readable
    assert extra.get_section("mybench", Record) is None
    with pytest.raises(ValueError, match="runner section"):
        extra.set_section("budget", Record(version="1"))
