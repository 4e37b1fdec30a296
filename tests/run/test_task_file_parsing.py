"""``--task-file``: the file formats and their one-line errors (pure, no pytest run)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.run.plan import PlanError, read_task_file, unknown_ids


def test_one_id_a_line_with_comments_blanks_and_repeats(tmp_path: Path) -> None:
    path = tmp_path / "tasks.txt"
    path.write_text("# Gate-20 smoke\n\nabishekvashok__cmatrix.5c082c6\n"
                    "  ajeetdsouza__zoxide.67ca1bc  # trailing comment\r\n"
                    "abishekvashok__cmatrix.5c082c6\n")
    assert read_task_file(path) == ["abishekvashok__cmatrix.5c082c6",
                                     "ajeetdsouza__zoxide.67ca1bc"]


def test_the_gate_json_and_a_json_list_are_task_files(tmp_path: Path) -> None:
    gate = tmp_path / "gate20.json"
    gate.write_text(json.dumps({"smoke": ["a", "b"], "unseen": ["c"]}, indent=2))
    assert read_task_file(gate) == ["a", "b", "c"]
    listed = tmp_path / "list.json"
    listed.write_text('["x", "y"]')
    assert read_task_file(listed) == ["x", "y"]


@pytest.mark.parametrize(("text", "message"), [
    ("alpha\nbad id\n", "line 2: 'bad id' is not an instance id"),
    ("../escape\n", "'../escape' is not an instance id"),
    ("# only a comment\n\n", "lists no instance id"),
    ('{"smoke": "a"}', "'smoke' must be a list of instance ids"),
    ('{"smoke": [', "not valid JSON"),
])
def test_a_bad_file_is_refused_naming_the_flag_and_the_file(tmp_path: Path, text: str,
                                                             message: str) -> None:
    path = tmp_path / "tasks.txt"
    path.write_text(text)
    with pytest.raises(PlanError) as info:
        read_task_file(path)
    assert str(info.value).startswith(f"--task-file {path}")
    assert message in str(info.value) and "\n" not in str(info.value)


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="no such file"):
        read_task_file(tmp_path / "absent.txt")
    with pytest.raises(PlanError, match="cannot read it"):
        read_task_file(tmp_path)  # a directory
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(PlanError, match="cannot read it"):
        read_task_file(binary)
    if os.geteuid() != 0:  # root reads any file
        locked = tmp_path / "locked.txt"
        locked.write_text("a\n")
        locked.chmod(0)
        with pytest.raises(PlanError, match="cannot read it"):
            read_task_file(locked)


def test_unknown_ids_keep_the_order_given() -> None:
    assert unknown_ids(["z", "a", "z", "b"], ["a"]) == ["z", "b"]
    assert unknown_ids([], ["a"]) == []
