"""harness.run.secrets: every form of a secret is found and redacted in place, in plain
files and in a submission ``.tar.gz``, streaming with bounded memory, never following links."""

from __future__ import annotations

import base64
import io
import os
import secrets
import tarfile
import textwrap
import tracemalloc
from pathlib import Path

import pytest

from harness.run import secrets as S
from harness.run.secrets import MARKER, SecretScanner, scan_and_redact

SECRET = "sk-test-" + secrets.token_urlsafe(30)  # long enough for base64 to hold '-'/'_'
NAME = "MY_API_KEY"


def encodings(value: str) -> dict[str, list[bytes]]:
    """The value as an agent might leak it: inside longer texts, at every alignment."""
    raw = value.encode()
    out: dict[str, list[bytes]] = {"raw": [b"key=" + raw + b"\n"], "hex": [], "hex_upper": [],
                                   "base64": [], "base64url": []}
    for pad in (b"", b"x", b"xy"):
        blob = pad + b"token:" + raw + b";end"
        out["base64"].append(base64.b64encode(blob))
        out["base64url"].append(base64.urlsafe_b64encode(blob))
        out["hex"].append(blob.hex().encode())
        out["hex_upper"].append(blob.hex().upper().encode())
    wrapped = textwrap.fill(base64.b64encode(b"A" * 50 + raw).decode(), 76).encode()
    out["base64"].append(wrapped)  # what `base64` prints: lines of 76 characters
    return out


def forms_left(data: bytes, value: str = SECRET) -> list[str]:
    """Which forms of ``value`` an independent check still finds in ``data``."""
    found = []
    raw = value.encode()
    unwrapped = data.replace(b"\r\n", b"").replace(b"\n", b"")
    if raw in data:
        found.append("raw")
    if raw.hex().encode() in data or raw.hex().upper().encode() in data:
        found.append("hex")
    for pad in range(3):
        for enc in (base64.b64encode, base64.urlsafe_b64encode):
            full = enc(b"\0" * pad + raw)
            core = full[-(-8 * pad // 6):(8 * pad + 8 * len(raw)) // 6]
            if core in unwrapped:
                found.append(f"base64:{pad}")
    return found


@pytest.mark.parametrize("form", ["raw", "hex", "hex_upper", "base64", "base64url"])
def test_each_form_is_found_and_redacted(form: str) -> None:
    scanner = SecretScanner({NAME: SECRET})
    for sample in encodings(SECRET)[form]:
        assert forms_left(sample), "the sample must hold the secret"
        redacted, counts = scanner.scan_bytes(sample)
        # where both alphabets give the same characters, the one form is named "base64"
        named = {form, "base64"} if form == "base64url" else {form}
        assert sum(n for (_, f), n in counts.items() if f in named) == 1, (form, sample)
        assert sum(counts.values()) == 1
        assert MARKER in redacted and forms_left(redacted) == []


def test_streaming_across_chunk_boundaries_equals_one_pass(
        monkeypatch: pytest.MonkeyPatch) -> None:
    data = b"".join(s + os.urandom(13) for samples in encodings(SECRET).values()
                    for s in samples) * 3
    scanner = SecretScanner({NAME: SECRET})
    whole, expected = scanner.scan_bytes(data)
    for chunk in (1, 7, 64, 1000):
        monkeypatch.setattr(S, "CHUNK", chunk)
        out = io.BytesIO()
        counts, size = scanner.scan_stream(io.BytesIO(data).read, out.write)
        assert size == len(data) and counts == expected and out.getvalue() == whole
    assert sum(expected.values()) == 3 * sum(len(v) for v in encodings(SECRET).values())


def test_tree_is_redacted_in_place_without_following_links(tmp_path: Path) -> None:
    root = tmp_path / "run"
    (root / "ws" / "deep").mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    outside.write_text(f"host file {SECRET}")
    leak = root / "ws" / "deep" / "leak.log"
    leak.write_bytes(b"\n".join(s for v in encodings(SECRET).values() for s in v))
    leak.chmod(0o640)
    (root / "ws" / "clean.txt").write_text("nothing here")
    (root / "ws" / "link").symlink_to(outside)
    os.mkfifo(root / "ws" / "fifo")  # would block a plain open(): skipped
    (root / "ws" / f"named-{SECRET}.txt").write_text("its name leaks")
    report = scan_and_redact(root, {NAME: SECRET, "SHORT": "abc"})
    assert report.skipped == ["SHORT"] and report.secrets == [NAME]
    assert forms_left(leak.read_bytes()) == [] and leak.stat().st_mode & 0o777 == 0o640
    assert outside.read_text() == f"host file {SECRET}", "a link target is never touched"
    assert (root / "ws" / "link").is_symlink()
    assert (root / "ws" / "clean.txt").read_text() == "nothing here"
    names = sorted(p.name for p in (root / "ws").iterdir())
    assert not any(SECRET in n for n in names) and "named-REDACTED-SECRET.txt" in names
    forms = {h.form for h in report.hits if h.file == "ws/deep/leak.log"}
    assert {"raw", "hex", "hex_upper", "base64"} <= forms
    assert SECRET not in repr(report.record())
    again = scan_and_redact(root, {NAME: SECRET})
    assert again.hits == [] and again.errors == []


def _tar_gz(path: Path, members: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_submission_archive_is_rewritten_with_redacted_members(tmp_path: Path) -> None:
    sub = tmp_path / "submission.tar.gz"
    b64 = base64.b64encode(b"key:" + SECRET.encode())
    _tar_gz(sub, {"main.sh": b"echo hi\n", "notes/leak.txt": b"x" * 100 + b64 + b"\n",
                  f"dir/{SECRET}.txt": b"named"})
    assert SECRET.encode() not in sub.read_bytes(), "compressed: a raw scan would miss it"
    report = scan_and_redact(tmp_path, {NAME: SECRET})
    hits = {(h.file.split(":", 1)[1], h.form) for h in report.hits}
    assert ("notes/leak.txt", "base64") in hits
    assert ("dir/[harness:redacted-secret].txt", "raw") in hits
    with tarfile.open(sub, "r:gz") as tar:
        contents = {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]
    assert contents["main.sh"] == b"echo hi\n"
    assert forms_left(contents["notes/leak.txt"]) == [] and MARKER in contents["notes/leak.txt"]
    assert not any(SECRET in name for name in contents)
    assert scan_and_redact(tmp_path, {NAME: SECRET}).hits == []


def test_a_big_file_is_scanned_with_bounded_memory(tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    with open(big, "wb") as fh:
        for _ in range(48):
            fh.write(b"\0" * (1 << 20))
        fh.write(base64.b64encode(SECRET.encode()))
    tracemalloc.start()
    try:
        report = scan_and_redact(tmp_path, {NAME: SECRET})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [(h.form, h.count) for h in report.hits] == [("base64", 1)]
    assert report.bytes >= 48 << 20 and peak < 16 << 20, peak
    assert big.stat().st_size < (48 << 20) + 100


def test_a_tree_deeper_than_the_recursion_limit_is_scanned_to_the_bottom(tmp_path: Path) -> None:
    """An agent can nest folders past the recursion limit to get its files past a recursive
    walk. The limit is lowered for the scan instead of nesting thousands deep, so that
    pytest's own (recursive) tmp cleanup never meets such a tree."""
    import inspect
    import sys

    root = tmp_path / "run"
    deepest = root / "ws"
    deepest.mkdir(parents=True)
    for _ in range(400):
        deepest = deepest / "d"
        os.mkdir(deepest)
    leak = deepest / "leak.log"
    leak.write_text(f"token={SECRET}")
    (deepest / f"named-{SECRET}").mkdir()
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 150)  # 400 levels are past it
    try:
        report = scan_and_redact(root, {NAME: SECRET})
    finally:
        sys.setrecursionlimit(limit)
    assert report.errors == []
    assert forms_left(leak.read_bytes()) == []
    assert [p.name for p in deepest.iterdir() if p.is_dir()] == ["named-REDACTED-SECRET"]
