"""The carried rows' instance folders, written by a helper process while the run goes on
(harness.run.folder_copies): every copy lands, also when the helper dies, cannot start, or
a Ctrl-C reaches it; a copy that cannot be written is reported, kept and retried."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from harness.core.models import Outcome, TaskRow
from harness.run.folder_copies import Entry, FolderCopies
from harness.run.ledger import LedgerWriter, read_ledger

NAME = "result_index.jsonl"


def entries(n: int) -> list[Entry]:
    return [("b", f"i{k}", f'{{"n": {k}}}') for k in range(n)]


def written(root: Path, n: int) -> list[str]:
    return [(root / "b" / f"i{k}" / "result_index.jsonl").read_text() for k in range(n)]


def test_the_helper_writes_every_copy_once(tmp_path: Path) -> None:
    copies = FolderCopies(str(tmp_path), NAME, entries(300))
    assert copies.proc is not None  # a helper process, not this one
    assert copies.wait() == []
    assert written(tmp_path, 300) == [f'{{"n": {k}}}\n' for k in range(300)]


def test_a_helper_that_cannot_start_leaves_the_copies_to_the_run(tmp_path: Path) -> None:
    def no_process(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        raise OSError(11, "Resource temporarily unavailable")

    copies = FolderCopies(str(tmp_path), NAME, entries(5), spawn=no_process)
    assert copies.wait() == []
    assert written(tmp_path, 5) == [f'{{"n": {k}}}\n' for k in range(5)]


def test_a_killed_helper_leaves_no_copy_missing_and_none_twice(tmp_path: Path) -> None:
    """The helper is killed part-way: the run writes what is missing or empty, and only
    that (a copy the helper wrote is not appended again)."""
    all_entries = entries(50)
    for benchmark, iid, line in all_entries[:20]:  # what the helper had done
        (tmp_path / benchmark / iid).mkdir(parents=True)
        (tmp_path / benchmark / iid / NAME).write_text(line + "\n")
    (tmp_path / "b" / "i20").mkdir()
    (tmp_path / "b" / "i20" / NAME).touch()  # created, killed before its write

    def dying(args: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen(["sh", "-c", "kill -9 $$"], **kwargs)

    copies = FolderCopies(str(tmp_path), NAME, all_entries, spawn=dying)
    assert copies.wait() == []
    assert written(tmp_path, 50) == [f'{{"n": {k}}}\n' for k in range(50)]


def ignores_sigint(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:"))
    return bool(int(mask, 16) & (1 << (signal.SIGINT - 1)))


def test_ctrl_c_does_not_stop_the_helper(tmp_path: Path) -> None:
    """A Ctrl-C reaches the whole foreground group: the helper, once started, finishes
    its short job (one that a Ctrl-C stops earlier is covered by the run, as above)."""
    n = 5000
    copies = FolderCopies(str(tmp_path), NAME, entries(n))
    assert copies.proc is not None
    deadline = time.monotonic() + 10
    while not ignores_sigint(copies.proc.pid):
        assert copies.proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.001)
    copies.proc.send_signal(signal.SIGINT)
    assert copies.wait() == []
    assert copies.proc.returncode == 0  # it finished its job itself
    assert len(written(tmp_path, n)) == n


def test_a_copy_the_helper_cannot_write_is_named_kept_and_retried(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [TaskRow(ts_unix=1.0, run_id="r", benchmark="b", instance_id=f"i{n}",
                    status="skipped", outcome=Outcome.CARRIED, carried_from="a")
            for n in range(3)]
    (tmp_path / "b" / "i2" / "result_index.jsonl").mkdir(parents=True)  # cannot append
    writer = LedgerWriter(tmp_path)
    assert writer.append_batch(rows, new_folders=True)
    assert writer.settle() is False
    err = capsys.readouterr().err
    assert "diagnostic_write_failed" in err and "1 instance folder(s)" in err
    assert "IsADirectoryError" in err
    (tmp_path / "b" / "i2" / "result_index.jsonl").rmdir()
    assert writer.flush_pending() == 0
    assert [r.instance_id for r in
            read_ledger(tmp_path / "b" / "i2" / "result_index.jsonl").rows] == ["i2"]


def test_a_later_row_of_a_carried_instance_follows_its_carried_copy(tmp_path: Path) -> None:
    carried = TaskRow(ts_unix=1.0, run_id="r", benchmark="b", instance_id="i0",
                      status="skipped", outcome=Outcome.CARRIED, carried_from="a")
    later = carried.model_copy(update={"ts_unix": 2.0, "outcome": Outcome.SCORED,
                                       "status": "failed"})
    writer = LedgerWriter(tmp_path)
    assert writer.append_batch([carried], new_folders=True)
    assert writer.append(later)  # waits for the helper first: the copy stays in order
    assert writer.copies is None
    assert [r.ts_unix for r in
            read_ledger(tmp_path / "b" / "i0" / "result_index.jsonl").rows] == [1.0, 2.0]


def test_a_ledger_row_naming_a_benchmark_outside_the_run_root_is_refused(tmp_path: Path) -> None:
    """A tampered ancestor (a run root from an untrusted shard's artifact): a row whose
    benchmark is ``..`` or a path would name a folder outside the run root for its copy.
    Such a row is corrupt where it is read: no folder is made anywhere."""
    from harness.run.ledger import LedgerError

    good = TaskRow(ts_unix=1.0, run_id="r", benchmark="b", instance_id="i0",
                   status="skipped", outcome=Outcome.CARRIED, carried_from="a")
    for bad in ("..", "../../outside", "a/b", "."):
        line = good.dump_line().replace('"benchmark":"b"', f'"benchmark":"{bad}"')
        assert f'"benchmark":"{bad}"' in line
        ledger = tmp_path / bad.replace("/", "_") / "result_index.jsonl"
        ledger.parent.mkdir(parents=True, exist_ok=True)
        ledger.write_text(good.dump_line() + "\n" + line + "\n" + good.dump_line() + "\n")
        with pytest.raises(LedgerError, match="line 2 is corrupt"):
            read_ledger(ledger)
    assert not (tmp_path.parent / "outside").exists()
    with pytest.raises(ValueError, match=re.escape("invalid benchmark name '../x'")):
        TaskRow(ts_unix=1.0, run_id="r", benchmark="../x", instance_id="i0",
                status="skipped", outcome=Outcome.CARRIED)
