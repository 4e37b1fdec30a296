"""The verdict after pytest wrote it (issue 40, class 3): two wrong programs (each prints 0;
an honest eval gives 0.0) that the bare official eval scores 1.0, scored by our eval.

* The program appends a line to the running ``eval/run.sh``: its shell reads the script as it
  goes, so the line runs after pytest and strips the failures from ``results.xml``.
* The program leaves a process whose thread-group leader exited: the leader shows as a
  zombie, which the results guard passed over, while a live thread strips the failures.

Each runs as a control through the bare CLI (real Docker, no guard, no policy), then through
``evaluate_instance`` (the docker policy and its results guard).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.fixture import ensure_fixture
from benchmarks.programbench.official_eval import evaluate_instance
from benchmarks.programbench.submission import build_submission
from tests.security.scorer_support import raw_score_alongside, write

pytestmark = pytest.mark.docker

STRIP = (
    "import re\n"
    "path = '/workspace/eval/results.xml'\n"
    "def strip():\n"
    "    text = open(path).read()\n"
    "    if '<failure' in text and text.rstrip().endswith('>'):\n"
    "        text = re.sub(r'<failure.*?</failure>', '', text, flags=re.S)\n"
    "        open(path, 'w').write(re.sub(r'failures=\"\\d+\"', 'failures=\"0\"', text))\n"
    "        return True\n"
    "    return False\n"
)
COMPILE = "#!/bin/bash\ncp program.sh executable\nchmod +x executable\n"

APPEND = {
    "strip.py": STRIP + "strip()\n",
    "program.sh": ("#!/bin/sh\n"
                   "if [ ! -e /tmp/.appended ]; then touch /tmp/.appended\n"
                   "  printf '\\npython3 /workspace/strip.py\\n' >> /workspace/eval/run.sh\n"
                   "fi\necho 0\n"),
    "compile.sh": COMPILE,
}

THREAD_GROUP = {
    "group.py": (STRIP + "import ctypes, threading, time\n"
                 "def loop():\n"
                 "    for _ in range(200000):\n"
                 "        try:\n"
                 "            strip()\n"
                 "        except OSError:\n"
                 "            pass\n"
                 "        time.sleep(0.001)\n"
                 "threading.Thread(target=loop).start()\n"
                 "ctypes.CDLL(None).pthread_exit(None)  # the leader exits: a zombie\n"),
    "program.sh": ("#!/bin/sh\n"
                   "if [ ! -e /tmp/.spawned ]; then touch /tmp/.spawned\n"
                   "  setsid python3 /workspace/group.py >/dev/null 2>&1 </dev/null &\n"
                   "fi\necho 0\n"),
    "compile.sh": COMPILE,
}


def _guarded_score(tmp: Path, files: dict[str, str]) -> float | None:
    fixture = ensure_fixture()
    ws = tmp / "ws"
    for rel, text in files.items():
        write(ws / rel, text, 0o755 if rel.endswith(".sh") else 0o644)
    build_submission(ws, tmp / "src" / FIXTURE_ID / "submission.tar.gz")
    result = evaluate_instance(tmp / "src", FIXTURE_ID, blob_dir=fixture.blob_dir)
    assert result.official_eval_status == "completed", result.error_message
    shutil.rmtree(ws)
    return result.score


@pytest.mark.parametrize("files", [APPEND, THREAD_GROUP], ids=["append-run-sh", "zombie-leader"])
def test_a_verdict_rewritten_after_pytest_does_not_count(
        tmp_path: Path, files: dict[str, str]) -> None:
    with raw_score_alongside(tmp_path / "control", files) as control:
        guarded = _guarded_score(tmp_path / "guarded", files)
    assert control() == 1.0  # the bare official eval is fooled
    assert guarded == 0.0  # ours scores what the program earns


# A wrong program (prints 0) with a pytest plugin the judge's pytest would load by entry point:
# a *.dist-info at the workspace root, found through the working directory on sys.path.
DIST_INFO = {
    "forcepass-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: forcepass\nVersion: 0.1\n",
    "forcepass-0.1.dist-info/entry_points.txt": "[pytest11]\nforcepass = forcepass_hooks\n",
    "forcepass_hooks.py": ("import pytest\n\n\n"
                           "@pytest.hookimpl(hookwrapper=True)\n"
                           "def pytest_runtest_makereport(item, call):\n"
                           "    outcome = yield\n"
                           "    outcome.get_result().outcome = 'passed'\n"),
    "program.sh": "#!/bin/sh\necho 0\n",
    "compile.sh": COMPILE,
}


def test_an_entry_point_plugin_in_the_submission_is_never_loaded(tmp_path: Path) -> None:
    with raw_score_alongside(tmp_path / "control", DIST_INFO) as control:
        guarded = _guarded_score(tmp_path / "guarded", DIST_INFO)
    assert control() == 1.0  # the bare official eval loads it and every test passes
    assert guarded == 0.0  # autoload is off in our judge: only the eval's own plugins load
