"""``_stats/languages.json`` of a submission directory: each instance's primary language.

The registry's rule (``ProgramBench/submissions``, its language statistics): count the
non-blank lines of the recognized source files in ``submission.tar.gz`` (by file suffix;
version-control, dependency and build folders skipped), attribute C/C++ headers to
whichever of C and C++ has more lines, and name the language with the most lines, the
alphabetically first on a tie; ``unknown`` when no file is recognized. The identifiers are
those of ProgramBench's task metadata (``rs``, ``go``, ``c``, ``cpp``, ``sh``, ...).

The archive is the agent's (untrusted): it is read member by member without extracting,
regular files only, at most :data:`MAX_READ_BYTES` in all.
"""

from __future__ import annotations

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
MAX_READ_BYTES = 256 << 20  # of one archive's members, in all
CHUNK = 1 << 16  # bytes read at once
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
    with tarfile.open(archive, "r:*") as tar:
        for member in tar:
            language = language_of(member.name) if member.isreg() else None
            if language is None or budget <= 0:
                continue
            source = tar.extractfile(member)
            if source is None:
                continue
            lines, budget = _nonblank_lines(source, budget)
            counts[language] += lines  # a recognized file counts even when blank
    headers = counts.pop(HEADER, 0)
    if headers:
        counts["cpp" if counts["cpp"] > counts["c"] else "c"] += headers
    return dict(counts)


def _nonblank_lines(source: IO[bytes], budget: int) -> tuple[int, int]:
    """Non-blank lines of ``source`` read in bounded pieces (a line of a gigabyte is never
    held whole), at most ``budget`` bytes; returns the lines and the budget left."""
    lines, nonblank = 0, False
    while budget > 0:
        piece = source.readline(min(CHUNK, budget))
        if not piece:
            break
        budget -= len(piece)
        nonblank = nonblank or bool(piece.strip())
        if piece.endswith(b"\n"):
            lines, nonblank = lines + nonblank, False
    return lines + nonblank, budget


def primary_language(counts: dict[str, int]) -> str:
    """The language with the most lines, the alphabetically first on a tie."""
    if not counts:
        return UNKNOWN
    return min(counts, key=lambda language: (-counts[language], language))


class LanguagesStat(RootModel[dict[str, str]]):
    """``_stats/languages.json``: instance id -> its primary language, keys sorted."""


def submission_languages(dest: Path, instance_ids: list[str]) -> LanguagesStat:
    """The languages of the packed instances of a submission directory (an archive that
    cannot be read is ``unknown``)."""
    out: dict[str, str] = {}
    for iid in sorted(instance_ids):
        try:
            out[iid] = primary_language(language_lines(dest / iid / "submission.tar.gz"))
        except (OSError, tarfile.TarError, EOFError):
            out[iid] = UNKNOWN
    return LanguagesStat(out)
