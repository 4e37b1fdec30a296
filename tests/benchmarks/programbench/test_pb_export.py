"""Exporting a run's submissions into a fresh eval-ready tree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.programbench.export import ExportManifest, export_command, export_run
from harness.run.manifest import new_manifest, write_manifest


def _run(tmp: Path) -> Path:
    run = tmp / "run"
    for iid, data in (
        ("a__x.1234567", b"tarball-a"),
        ("b__y.1234567", b""),
        ("c__z.1234567", None),
    ):
        folder = run / "programbench" / iid
        folder.mkdir(parents=True)
        if data is not None:
            (folder / "submission.tar.gz").write_bytes(data)
    manifest = new_manifest(run_id="r", run_root=run, argv=[], dry_run=False, workers=0)
    manifest.selection.instance_ids = [
        "programbench/a__x.1234567",
        "programbench/d__w.1234567",
        "cowork_bench/t1",
    ]
    write_manifest(manifest, run)
    return run


def test_export_copies_non_empty_submissions_and_lists_the_rest(tmp_path: Path) -> None:
    run = _run(tmp_path)
    dest = tmp_path / "export"
    manifest = export_run(run, dest)
    assert manifest.copied_ids == ["a__x.1234567"]
    assert manifest.missing_ids == ["b__y.1234567", "c__z.1234567", "d__w.1234567"]
    assert manifest.requested == 4 and manifest.copied == 1
    assert (dest / "a__x.1234567" / "submission.tar.gz").read_bytes() == b"tarball-a"
    assert not (dest / "b__y.1234567").exists()
    on_disk = ExportManifest.model_validate_json((dest / "export_manifest.json").read_text())
    assert on_disk.files[0].size_bytes == 9 and on_disk.source_run == str(run.resolve())
    order = json.loads((dest / "instance_order.json").read_text())
    assert order["instance_ids"] == ["a__x.1234567"] and order["exported_from"] == str(
        run.resolve()
    )
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left


def test_export_refuses_an_existing_output_and_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run(tmp_path)
    existing = tmp_path / "taken"
    existing.mkdir()
    with pytest.raises(FileExistsError):
        export_run(run, existing)
    assert export_command([str(run), "--output", str(existing)]) == 2
    assert "exists" in capsys.readouterr().err
    assert export_command([str(tmp_path / "missing"), "--output", str(tmp_path / "o")]) == 2
    assert export_command([str(run)]) == 2  # --output is required
    assert export_command([str(run), "--output", str(tmp_path / "o2"), "--filter", "c__"]) == 0
    assert "exported 0 of 1" in capsys.readouterr().out


def test_harness_programbench_command_dispatch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli import main

    run = _run(tmp_path)
    assert main(["programbench", "export", str(run), "--output", str(tmp_path / "e")]) == 0
    assert (tmp_path / "e" / "export_manifest.json").exists()
    assert main(["programbench", "--help"]) == 0
    assert "gate" in capsys.readouterr().out
    assert main(["programbench", "nope"]) == 2
