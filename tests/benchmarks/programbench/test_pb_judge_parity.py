"""Parity of the separated judge (issue 40): honest builds that write the usual places score
under our eval (the build and the program as the program user, the judge as root) what the
bare official eval (everything as root) gives them.

The fixture image has Python but no Rust, Go or make toolchain (Debian's would add minutes
to every CI setup), so the build patterns are those toolchains' writes, made by the build
itself: caches in the home (``~/.cargo/registry``, ``~/go/pkg/mod``, ``~/.cache/go-build``)
that the program reads again at test time, a virtual environment in the workspace, a build
folder, ``git`` in the workspace's repository, and a program that imports the module beside
it (so the judge's ``PYTHONSAFEPATH`` must not reach it).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.fixture import ensure_fixture
from benchmarks.programbench.official_eval import evaluate_instance
from benchmarks.programbench.program_user import PROGRAM_UID
from benchmarks.programbench.submission import build_submission
from benchmarks.programbench.verdict import verdict
from tests.security.scorer_support import raw_score_alongside, write

pytestmark = pytest.mark.docker

HONEST = {
    "compile.sh": ("#!/bin/bash\nset -e\n"
                   'mkdir -p "$HOME/.cargo/registry/cache" "$HOME/go/pkg/mod/cache" '
                   '"$HOME/.cache/go-build"\n'
                   'echo ok > "$HOME/.cargo/registry/cache/crate"\n'
                   'echo ok > "$HOME/go/pkg/mod/cache/module"\n'
                   "python3 -m venv --without-pip .venv\n"
                   "mkdir -p build && cp calc_core.py build/\n"
                   "git rev-parse HEAD > build/revision\n"
                   "cat > executable <<'E'\n#!/bin/sh\nhere=$(dirname \"$0\")\n"
                   'exec "$here/.venv/bin/python3" "$here/calc.py" "$@"\nE\n'
                   "chmod +x executable\n"),
    "calc.py": ("import os, sys\n"
                "import calc_sibling  # beside this file: the script's folder is on sys.path\n"
                "here = os.path.dirname(os.path.abspath(__file__))\n"
                "sys.path.insert(0, os.path.join(here, 'build'))\n"
                "from calc_core import calc\n"
                "for cache in ('~/.cargo/registry/cache/crate', '~/go/pkg/mod/cache/module'):\n"
                "    with open(os.path.expanduser(cache)) as fh:\n"
                "        assert fh.read().strip() == 'ok'\n"
                "assert os.path.getsize(os.path.join(here, 'build', 'revision')) > 0\n"
                "print(calc_sibling.shown(calc(*sys.argv[1:4])))\n"),
    "calc_sibling.py": "def shown(value):\n    return str(value)\n",
    "calc_core.py": ("def calc(a, op, b):\n    a, b = int(a), int(b)\n"
                     "    return {'+': a + b, '-': a - b, '*': a * b}[op]\n"),
}


def test_an_honest_build_that_writes_the_usual_places_scores_as_the_bare_eval(
        tmp_path: Path) -> None:
    fixture = ensure_fixture()
    ws = tmp_path / "ws"
    for rel, text in HONEST.items():
        write(ws / rel, text, 0o755 if rel.endswith(".sh") else 0o644)
    build_submission(ws, tmp_path / "src" / FIXTURE_ID / "submission.tar.gz")
    with raw_score_alongside(tmp_path / "control", HONEST) as control:
        ours = evaluate_instance(tmp_path / "src", FIXTURE_ID, blob_dir=fixture.blob_dir)
    shutil.rmtree(ws)
    assert control() == 1.0
    assert (ours.official_eval_status, ours.score) == ("completed", 1.0), ours.error_message
    assert ours.docker_policy is not None and ours.docker_policy.build_user == PROGRAM_UID


# A correct calculator "installed" the way ``make install`` would, into /usr/local/bin: the
# official eval (root) scores it 1.0; the separated judge cannot give the build root.
NEEDS_ROOT = {
    "compile.sh": ("#!/bin/bash\nset -e\ninstall -m 0755 calc.sh /usr/local/bin/hx-calc\n"
                   "ln -s /usr/local/bin/hx-calc executable\n"),
    "calc.sh": "#!/bin/bash\necho $(($1 $2 $3))\n",
}


def test_an_honest_build_that_needs_root_is_refused_by_name_never_a_silent_zero(
        tmp_path: Path) -> None:
    fixture = ensure_fixture()
    ws = tmp_path / "ws"
    for rel, text in NEEDS_ROOT.items():
        write(ws / rel, text, 0o755)
    build_submission(ws, tmp_path / "src" / FIXTURE_ID / "submission.tar.gz")
    with raw_score_alongside(tmp_path / "control", NEEDS_ROOT) as control:
        ours = evaluate_instance(tmp_path / "src", FIXTURE_ID, blob_dir=fixture.blob_dir)
    assert control() == 1.0
    assert (ours.official_eval_status, ours.error_code, ours.score) == (
        "error", "build_needs_root", None), ours
    assert "/usr/local/bin/hx-calc" in (ours.error_message or "")
    row = verdict(ours, completed=True, reason=None)
    assert (row.reason_code, row.score) == ("build_needs_root", None)
