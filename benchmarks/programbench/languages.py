"""``_stats/languages.json`` of a submission directory: each instance's primary language.

The registry's rule (``ProgramBench/submissions``, its language statistics): count the
non-blank lines of the recognized source files in ``submission.tar.gz`` (by file suffix;
version-control, dependency and build folders skipped), attribute C/C++ headers to
whichever of C and C++ has more lines, and name the language with the most lines, the
alphabetically first on a tie; ``unknown`` when no file is recognized. The identifiers are
those of ProgramBench's task metadata (``rs``, ``go``, ``c``, ``cpp``, ``sh``, ...).

The archive is the agent's (untrusted): it is read as a stream without extracting, regular
files only, at most :data:`MAX_READ_BYTES` decompressed and :data:`MAX_MEMBERS` members, in
a child process with its memory and CPU time bounded (:func:`submission_languages`): an
archive that breaks the reader, or any bound, is ``unknown``.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tarfile
from collections import Counter
from pathlib import Path, PurePosixPath
from typing import IO

from pydantic import RootModel

HEADER = "_c_header"
LANGUAGE_OF_SUFFIX: dict[str, str] = {
    **dict.fromkeys((".c",), "c"),
    **dict.fromkeys((".cc", ".cpp", ".cxx", ".hh", ".hpp", ".hxx"), "cpp"),
    ".h": HEADER,
    ".go": "go", ".rs": "rs", ".java": "java", ".cs": "cs", ".lua": "lua", ".zig": "zig",
    ".nim": "nim", ".dart": "dart", ".jl": "jl", ".sol": "sol", ".swift": "swift",
    ".rb": "rb", ".php": "php", ".r": "r", ".scala": "scala",
    **dict.fromkeys((".hs", ".lhs"), "hs"),
    **dict.fromkeys((".py", ".pyi", ".pyw"), "py"),
    **dict.fromkeys((".js", ".jsx", ".mjs", ".cjs"), "js"),
    **dict.fromkeys((".ts", ".tsx"), "ts"),
    **dict.fromkeys((".sh", ".bash", ".zsh"), "sh"),
    **dict.fromkeys((".ex", ".exs"), "ex"),
    **dict.fromkeys((".erl", ".hrl"), "erl"),
    **dict.fromkeys((".pl", ".pm"), "pl"),
    **dict.fromkeys((".clj", ".cljs"), "clj"),
    **dict.fromkeys((".fs", ".fsx"), "fs"),
    **dict.fromkeys((".ml", ".mli"), "ml"),
    **dict.fromkeys((".v", ".vsh"), "v"),
    **dict.fromkeys((".kt", ".kts"), "kotlin"),
    **dict.fromkeys((".m", ".mm"), "objc"),
}
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", ".venv", "venv", "node_modules", "vendor",
                          "target", "build", "dist", "__pycache__"})
MAX_READ_BYTES = 256 << 20  # of one archive, decompressed, members and skipped ones alike
MAX_MEMBERS = 100_000
CHUNK = 1 << 16  # bytes read at once
CHILD_MEMORY = 768 << 20  # address space of the counting child
CHILD_CPU_S = 60
UNKNOWN = "unknown"


def language_of(name: str) -> str | None:
    """The language of an archive member named ``name`` (None: not a recognized source)."""
    path = PurePosixPath(name)
    if any(part.lower() in SKIPPED_DIRS for part in path.parts[:-1]):
        return None
    if path.suffix == ".C":  # upper-case C is C++
        return "cpp"
    return LANGUAGE_OF_SUFFIX.get(path.suffix.lower())


def language_lines(archive: Path) -> dict[str, int]:
    """Non-blank source lines per language in ``archive`` (headers attributed)."""
    counts: Counter[str] = Counter()
    budget = MAX_READ_BYTES
    with tarfile.open(archive, "r|*") as tar:  # a stream: members are not kept
        for n, member in enumerate(tar):
            tar.members.clear()  # type: ignore[attr-defined]  # tarfile keeps each header
            budget -= member.size if member.isreg() else 0  # skipped bytes are read too
            if n >= MAX_MEMBERS or budget < 0:
                break
            language = language_of(member.name) if member.isreg() else None
            source = tar.extractfile(member) if language is not None else None
            if language is None or source is None:
                continue
            counts[language] += _nonblank_lines(source)  # a recognized file counts though blank
    headers = counts.pop(HEADER, 0)
    if headers:
        counts["cpp" if counts["cpp"] > counts["c"] else "c"] += headers
    return dict(counts)


def _nonblank_lines(source: IO[bytes]) -> int:
    """Non-blank lines of ``source`` read in pieces (a line of a gigabyte is never held
    whole); the caller bounds the member's size."""
    lines, open_nonblank = 0, False
    while piece := source.read(CHUNK):
        parts = piece.split(b"\n")
        if len(parts) == 1:  # still inside one line
            open_nonblank = open_nonblank or bool(parts[0].strip())
            continue
        lines += int(open_nonblank or bool(parts[0].strip()))  # the open line ends
        lines += sum(1 for p in parts[1:-1] if p.strip())
        open_nonblank = bool(parts[-1].strip())
    return lines + int(open_nonblank)


def primary_language(counts: dict[str, int]) -> str:
    """The language with the most lines, the alphabetically first on a tie."""
    if not counts:
        return UNKNOWN
    return min(counts, key=lambda language: (-counts[language], language))


class LanguagesStat(RootModel[dict[str, str]]):
    """``_stats/languages.json``: instance id -> its primary language, keys sorted."""


def submission_languages(dest: Path, instance_ids: list[str]) -> LanguagesStat:
    """The languages of the packed instances of a submission directory, each counted in a
    child process bounded in memory and CPU time; an archive that breaks the reader or a
    bound is ``unknown``."""
    out: dict[str, str] = {}
    for iid in sorted(instance_ids):
        out[iid] = _count_in_child(dest / iid / "submission.tar.gz")
    return LanguagesStat(out)


def _count_in_child(archive: Path) -> str:
    def limits() -> None:  # in the child, before it runs any of the archive
        resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY, CHILD_MEMORY))
        resource.setrlimit(resource.RLIMIT_CPU, (CHILD_CPU_S, CHILD_CPU_S))

    try:
        done = subprocess.run([sys.executable, "-m", __name__, str(archive)],
                              capture_output=True, text=True, timeout=CHILD_CPU_S * 2,
                              preexec_fn=limits, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return UNKNOWN
    found = done.stdout.strip()
    return found if done.returncode == 0 and found.isidentifier() else UNKNOWN


def main(argv: list[str]) -> int:
    """``python -m benchmarks.programbench.languages ARCHIVE``: its primary language."""
    try:
        print(primary_language(language_lines(Path(argv[0]))))
    except Exception:  # any way the archive breaks the reader: unknown, said by the parent
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
