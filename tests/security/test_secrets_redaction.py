"""Acceptance (issue 11, secrets): a command agent leaks its ``--agent-env`` secret, raw,
base64 and hex, into its workspace, a file name and its stdout. After the run nothing of it
is left in any of those forms anywhere under the run root (inside the submission archive
too), the hits are recorded in the row and the manifest, and the row settles normally."""

from __future__ import annotations

import base64
import gzip
import json
import os
import secrets
import tarfile
from pathlib import Path

import pytest

from benchmarks.programbench import FIXTURE_ID
from tests.support.suite import run_pytest

pytestmark = pytest.mark.docker

TARGET = "benchmarks/programbench"
VAR = "HX_LEAKY_TOKEN"

# Every line writes one form; the file name is the raw value.
LEAK = r"""
t="$HX_LEAKY_TOKEN"
printf 'token=%s\n' "$t" > leak.txt
printf '%s' "$t" | base64 >> leak.txt
printf 'x%s' "$t" | base64 -w0 >> leak.txt; echo >> leak.txt
printf 'xy%s' "$t" | base64 -w0 | tr '+/' '-_' >> leak.txt; echo >> leak.txt
printf '%s' "$t" | od -An -tx1 | tr -d ' \n' >> leak.txt; echo >> leak.txt
printf '%s' "$t" | od -An -tx1 | tr -d ' \n' | tr a-f A-F >> leak.txt; echo >> leak.txt
mkdir -p notes && printf 'pre%spost' "$t" | base64 > "notes/$t.txt"
echo "stdout raw $t"
printf 'q%s' "$t" | base64 -w0; echo
printf '%s' "$t" | od -An -tx1 | tr -d ' \n'; echo
echo "stderr $t" >&2
"""


def forms(value: str) -> list[bytes]:
    """What must not be left: raw, hex (both cases), base64/base64url at each alignment."""
    raw = value.encode()
    out = [raw, raw.hex().encode(), raw.hex().upper().encode()]
    for pad in range(3):
        for enc in (base64.b64encode, base64.urlsafe_b64encode):
            full = enc(b"\0" * pad + raw)
            out.append(full[-(-8 * pad // 6):(8 * pad + 8 * len(raw)) // 6])
    return out


def contents(root: Path) -> dict[str, bytes]:
    """Every file's bytes and name under ``root`` (no link followed), archives opened."""
    found: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            found[f"name:{path}"] = str(path).encode()
            if name in filenames and path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                found[str(path)] = data
                if name.endswith(".tar.gz"):
                    with tarfile.open(path, "r:gz") as tar:
                        for m in tar:
                            found[f"{path}:{m.name}"] = m.name.encode()
                            f = tar.extractfile(m) if m.isreg() else None
                            if f is not None:
                                found[f"{path}:{m.name}:data"] = f.read()
                elif data[:2] == b"\x1f\x8b":
                    found[f"{path}:gunzip"] = gzip.decompress(data)
    return found


def test_agent_env_secret_leaked_in_every_form_is_redacted_and_recorded(
        tmp_path: Path) -> None:
    secret = "hxsecret-" + secrets.token_hex(20)
    run = run_pytest(TARGET, tmp_path / "leak", "--pb-fixtures", "-k", "calculator", "--agent", "command",
                     "--agent-command", LEAK, "--agent-env", VAR, env={VAR: secret})
    # the row settles normally: scored (a wrong program), not an infrastructure failure
    row = run.latest[FIXTURE_ID]
    assert row["outcome"] == "scored" and row["official_eval_status"] == "completed", run.out
    assert row["infra"] is False and row["score"] == 0.0
    # nothing of the secret in any form, anywhere under the run root
    everything = contents(run.root)
    assert len(everything) > 10
    left = [(where, i) for where, data in everything.items()
            for i, form in enumerate(forms(secret)) if form in data.replace(b"\n", b"")]
    assert left == []
    # the hits are recorded (file, form, count), never the value
    hits = row["details"]["run"]["secret_hits"]
    by_file: dict[str, set[str]] = {}
    for hit in hits:
        assert hit["secret"] == VAR and hit["count"] >= 1
        by_file.setdefault(hit["file"], set()).add(hit["form"])
    # the workspace reaches the host only inside submission.tar.gz (no host copy of the tree)
    leak = next(f for f in by_file if f.endswith("submission.tar.gz:leak.txt"))
    assert {"raw", "base64", "hex", "hex_upper"} <= by_file[leak]
    assert any("submission.tar.gz:notes/[harness:redacted-secret]" in f for f in by_file), (by_file,
        "the file named after the secret (a member of the submission)")
    stdout = next(f for f in by_file if f.endswith("agent_stdout.log"))
    assert {"base64", "hex"} <= by_file[stdout]  # raw: already redacted by the agent runner
    scan = run.manifest["extra"]["secret_scan"]
    assert scan["secrets"] == [VAR] and scan["errors"] == []
    assert scan["instances_with_hits"] == [f"programbench/{FIXTURE_ID}"]
    assert secret not in json.dumps(run.manifest) and secret not in run.out
