"""The instance-folder copies of the rows a resume carries, written by a helper process
while the run goes on.

A resume carries thousands of rows at once. Each needs its folder made and its copy of the
ledger written: two file creations per row, which on a busy ext4 journal cost 0.1 to 0.4 ms
each, most of a resume's time. A thread cannot hide them (it waits on the interpreter lock
between its calls while pytest reports the carried items); a separate interpreter does, on
the other core: this file run as a script by ``python -I -S`` (standard library only,
started in a few milliseconds).

The entries go to the helper through an unlinked temporary file (its stdin: no pipe for
the run to wait on); the helper reports the entries it could not write on stdout, by
index and error. The helper ignores SIGINT, so a Ctrl-C lets it finish its short job; if
it dies anyway, or cannot start, :meth:`FolderCopies.wait` writes every copy still missing
or empty itself. Nothing is lost: the run root's ledger, the one every reader reads, was
written and fsynced before the helper started. Only :class:`harness.run.ledger.LedgerWriter`
uses this.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable

# (folder, copy file, line): the line is written once, appended, to a copy in a new folder
Entry = tuple[str, str, str]
Failure = tuple[int, str]  # index in the entries, the error

def write_entry(entry: Entry) -> None:
    """One entry, here: its folder (made when missing) and its copy (appended)."""
    folder, path, line = entry
    try:
        os.mkdir(folder)
    except FileExistsError:
        pass
    except FileNotFoundError:
        os.makedirs(folder, exist_ok=True)
    append_line(path, line)


def append_line(path: str | os.PathLike[str], line: str) -> None:
    """Append ``line`` to the file at ``path`` (made when missing): written, not fsynced."""
    data = (line + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def write_here(entries: list[Entry], indexes: range | list[int]) -> list[Failure]:
    failed: list[Failure] = []
    for i in indexes:
        try:
            write_entry(entries[i])
        except OSError as exc:
            failed.append((i, f"{type(exc).__name__}: {exc}"))
    return failed


def _missing(path: str) -> bool:
    try:
        return os.stat(path).st_size == 0
    except OSError:
        return True


class FolderCopies:
    """One batch of copies, being written by a helper process (or, when it could not
    start, already written here)."""

    def __init__(self, entries: list[Entry], *,
                 spawn: Callable[..., subprocess.Popen[bytes]] = subprocess.Popen) -> None:
        self.entries = entries
        self.proc: subprocess.Popen[bytes] | None = None
        self.failed: list[Failure] | None = None
        try:
            with tempfile.TemporaryFile() as data:
                data.write(json.dumps(entries).encode("utf-8"))
                data.seek(0)
                self.proc = spawn([sys.executable, "-I", "-S", __file__], stdin=data,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        except OSError:
            self.failed = write_here(entries, range(len(entries)))

    def wait(self) -> list[Failure]:
        """Wait for the helper; the entries that could not be written (index, error). An
        entry the helper did not get to (it died, or its report is unreadable) is written
        here when its copy is missing or empty."""
        if self.failed is not None:
            return self.failed
        assert self.proc is not None
        out, _ = self.proc.communicate()
        try:
            reported = json.loads(out) if self.proc.returncode == 0 else None
        except ValueError:
            reported = None
        if isinstance(reported, list):
            self.failed = [(int(i), str(why)) for i, why in reported]
        else:
            todo = [i for i, entry in enumerate(self.entries) if _missing(entry[1])]
            self.failed = write_here(self.entries, todo)
        return self.failed

    @property
    def keys(self) -> set[str]:
        """The copy files of this batch."""
        return {path for _, path, _ in self.entries}


def main() -> None:
    """The helper: the entries from stdin, the failures to stdout (this file run as a
    script, by an interpreter with no site packages: it imports only the standard
    library)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    entries = [tuple(e) for e in json.loads(sys.stdin.buffer.read())]
    failed = write_here(entries, range(len(entries)))  # type: ignore[arg-type]
    sys.stdout.write(json.dumps(failed))


if __name__ == "__main__":
    main()
