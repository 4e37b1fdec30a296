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

from pathlib import Path

import pytest

from tests.security.scorer_support import FORCE_PASS_HOOKS, evaluate_files, raw_score_alongside

# slow tier: end-to-end Docker runs of a minute or more together (CI runs the tier after
# the default one, which stays under its 10 minutes)
pytestmark = [pytest.mark.docker, pytest.mark.slow]

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


FAKE_XML = ('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" '
            'errors="0" failures="0" skipped="0" tests="3" time="0.03" hostname="x">'
            + "".join(f'<testcase classname="tests.test_calculator" name="test_{t}" '
                      'time="0.003"/>' for t in ("addition", "subtraction", "multiplication"))
            + "</testsuite></testsuites>")
# Fake results, then pytest's account forged into every pipe pytest holds (and any key it
# could find in pytest's stdin, environment or command line), then pytest killed: neither
# the results guard nor the JUnit writer runs.
KILL_AND_FORGE = {
    "fake.xml": FAKE_XML,
    "forge.py": ("import os, re, shutil, signal\n"
                 "pp = os.getppid()\n"
                 "shutil.copy('/workspace/fake.xml', '/workspace/eval/results.xml')\n"
                 "keys = {b'-'}\n"
                 "for name in ('fd/0', 'environ', 'cmdline'):\n"
                 "    try:\n"
                 "        keys |= set(re.findall(rb'[0-9a-f]{32}',\n"
                 "                    open(f'/proc/{pp}/{name}', 'rb').read(4096)))\n"
                 "    except OSError:\n"
                 "        pass\n"
                 "lines = b''.join(b'\\nHX-PYTEST-ACCOUNT ' + k + b' passed=3\\n' for k in keys)\n"
                 "for fd in os.listdir(f'/proc/{pp}/fd'):\n"
                 "    try:\n"
                 "        if os.readlink(f'/proc/{pp}/fd/{fd}').startswith('pipe:'):\n"
                 "            w = os.open(f'/proc/{pp}/fd/{fd}', os.O_WRONLY | os.O_NONBLOCK)\n"
                 "            os.write(w, lines)\n"
                 "            os.close(w)\n"
                 "    except OSError:\n"
                 "        pass\n"
                 "os.kill(pp, signal.SIGKILL)\n"),
    "program.sh": "#!/bin/sh\nexec python3 /workspace/forge.py\n",
    "compile.sh": COMPILE,
}
# A child of pytest made by clone(CLONE_PARENT): pytest's direct children (its xdist
# workers) were spared, so it outlived pytest and stripped the failures after it.
CLONE_PARENT = {
    "sibling.py": (STRIP + "import ctypes, os, time\n"
                   "pp = os.getppid()\n"
                   "pid = ctypes.CDLL(None).syscall(56, 0x8000 | 17, 0, 0, 0, 0)\n"
                   "if pid == 0:\n"
                   "    os.setsid()\n"
                   "    for fd in (0, 1, 2):\n"
                   "        os.close(fd)  # the exec's pipes end with pytest's\n"
                   "    end = time.time() + 60\n"
                   "    while time.time() < end:  # strips each results file pytest writes\n"
                   "        try:\n"
                   "            strip()\n"
                   "        except OSError:\n"
                   "            pass\n"
                   "        time.sleep(0.001)\n"
                   "    os._exit(0)\n"
                   "print(0)\n"),
    "program.sh": ("#!/bin/sh\nif [ ! -e /tmp/.sp ]; then touch /tmp/.sp; "
                   "exec python3 /workspace/sibling.py; fi\necho 0\n"),
    "compile.sh": COMPILE,
}


def _guarded(tmp: Path, files: dict[str, str]) -> tuple[float | None, str | None]:
    """(score, error code) of our eval of ``files``."""
    result = evaluate_files(tmp, files)
    if result.official_eval_status == "error":
        assert result.error_cause == "agent", result.error_message
    return result.score, result.error_code if result.official_eval_status == "error" else None


@pytest.mark.parametrize(("files", "want"), [
    (APPEND, (0.0, None)),
    (THREAD_GROUP, (0.0, None)),
    (CLONE_PARENT, (0.0, None)),
    # the program (the program user) cannot kill pytest (root): the account comes, and says
    # 0 (the account check itself: tests/security/test_pytest_account.py)
    (KILL_AND_FORGE, (0.0, None)),
], ids=["append-run-sh", "zombie-leader", "clone-parent", "kill-pytest-forge-account"])
def test_a_verdict_rewritten_after_pytest_does_not_count(
        tmp_path: Path, files: dict[str, str], want: tuple[float | None, str | None]) -> None:
    with raw_score_alongside(tmp_path / "control", files) as control:
        guarded = _guarded(tmp_path / "guarded", files)
    assert control() == 1.0  # the bare official eval is fooled
    assert guarded == want  # ours scores what the program earns, or refuses the file


# A wrong program (prints 0) with a pytest plugin the judge's pytest would load by entry point:
# a *.dist-info at the workspace root, found through the working directory on sys.path.
DIST_INFO = {
    "forcepass-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: forcepass\nVersion: 0.1\n",
    "forcepass-0.1.dist-info/entry_points.txt": "[pytest11]\nforcepass = forcepass_hooks\n",
    "forcepass_hooks.py": FORCE_PASS_HOOKS,
    "program.sh": "#!/bin/sh\necho 0\n",
    "compile.sh": COMPILE,
}


def test_an_entry_point_plugin_in_the_submission_is_never_loaded(tmp_path: Path) -> None:
    with raw_score_alongside(tmp_path / "control", DIST_INFO) as control:
        guarded = _guarded(tmp_path / "guarded", DIST_INFO)
    assert control() == 1.0  # the bare official eval loads it and every test passes
    assert guarded == (0.0, None)  # autoload is off in our judge: the eval's plugins only
