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

Every folder and file is opened relative to the run root's descriptor, never through a
symbolic link (``O_NOFOLLOW``): a link planted at ``<run_root>/<benchmark>``, at an
instance folder or at its copy makes that entry fail (reported), never a write elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable

# (benchmark, instance id, line): the line is appended to <root>/<benchmark>/<id>/<name>
Entry = tuple[str, str, str]
Failure = tuple[int, str]  # index in the entries, the error

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW


def subfolder(parent: int, name: str) -> int:
    """The descriptor of folder ``name`` in ``parent`` (made when missing; a link is
    refused)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o755, dir_fd=parent)
    return os.open(name, _DIR, dir_fd=parent)


def append_at(folder: int, name: str, line: str) -> None:
    """Append ``line`` to file ``name`` in ``folder`` (made when missing; a link is
    refused): written, not fsynced."""
    data = (line + "\n").encode("utf-8")
    fd = os.open(name, _APPEND, 0o644, dir_fd=folder)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def append_line(path: str | os.PathLike[str], line: str) -> None:
    """Append ``line`` to the file at ``path`` (made when missing; a link there is
    refused): written, not fsynced."""
    folder = os.open(os.path.dirname(os.fspath(path)) or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        append_at(folder, os.path.basename(os.fspath(path)), line)
    finally:
        os.close(folder)


def write_here(root: str, name: str, entries: list[Entry],
               indexes: Iterable[int]) -> list[Failure]:
    """Write ``entries[i]`` for each index, here; the failures (index, error)."""
    failed: list[Failure] = []
    benchmarks: dict[str, int] = {}
    try:
        top = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        return [(i, f"{type(exc).__name__}: {exc}") for i in indexes]
    try:
        for i in indexes:
            benchmark, iid, line = entries[i]
            try:
                if benchmark not in benchmarks:
                    benchmarks[benchmark] = subfolder(top, benchmark)
                folder = subfolder(benchmarks[benchmark], iid)
                try:
                    append_at(folder, name, line)
                finally:
                    os.close(folder)
            except OSError as exc:
                failed.append((i, f"{type(exc).__name__}: {exc}"))
    finally:
        for fd in benchmarks.values():
            os.close(fd)
        os.close(top)
    return failed


def _missing(path: str) -> bool:
    try:
        return os.stat(path, follow_symlinks=False).st_size == 0
    except OSError:
        return True


class FolderCopies:
    """One batch of copies under ``root`` (each ``<benchmark>/<id>/<name>``), being written
    by a helper process (or, when it could not start, already written here)."""

    def __init__(self, root: str, name: str, entries: list[Entry], *,
                 spawn: Callable[..., subprocess.Popen[bytes]] = subprocess.Popen) -> None:
        self.root, self.name, self.entries = root, name, entries
        self.instances = {(benchmark, iid) for benchmark, iid, _ in entries}
        self.proc: subprocess.Popen[bytes] | None = None
        self.failed: list[Failure] | None = None
        try:
            with tempfile.TemporaryFile() as data:
                data.write(json.dumps({"root": root, "name": name,
                                       "entries": entries}).encode("utf-8"))
                data.seek(0)
                self.proc = spawn([sys.executable, "-I", "-S", __file__], stdin=data,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        except OSError:
            self.failed = write_here(root, name, entries, range(len(entries)))

    def path(self, entry: Entry) -> str:
        return os.path.join(self.root, entry[0], entry[1], self.name)

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
            todo = [i for i, entry in enumerate(self.entries) if _missing(self.path(entry))]
            self.failed = write_here(self.root, self.name, self.entries, todo)
        return self.failed

    def holds(self, benchmark: str, instance_id: str) -> bool:
        """Whether this batch writes that instance's copy."""
        return (benchmark, instance_id) in self.instances


def main() -> None:
    """The helper: the batch from stdin, the failures to stdout (this file run as a script,
    by an interpreter with no site packages: it imports only the standard library)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    batch = json.loads(sys.stdin.buffer.read())
    entries = [(str(b), str(i), str(line)) for b, i, line in batch["entries"]]
    failed = write_here(str(batch["root"]), str(batch["name"]), entries, range(len(entries)))
    sys.stdout.write(json.dumps(failed))


if __name__ == "__main__":
    main()
