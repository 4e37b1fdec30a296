"""A judge the program under test cannot touch (issue 40, class 2 and the design): the build
and the program run as the program user, the judge as root.

* **Every place known to steer the judge, one test each**: the build tries to write it, and
  the kernel says no (EPERM or EACCES) whatever the path; no list of places plays a part
  (the write is refused when it is made, before any check of the build runs). The places come
  from the documentation of Python's startup, pytest, bash and login, the dynamic linker and
  pip. The world-writable folders are the exception: there the write succeeds, and what the
  build left is gone before the judge runs.
* **What the program can reach at test time**: run by the tests as the program user, it
  tries the judge's files, process and folders; each is refused.
* **A forgery that the bare official eval scores 1.0** (the build moves root's home in
  ``/etc/passwd`` to a folder of its own, whose ``.profile`` makes every test pass): our eval
  scores what the program earns.

One eval of one submission serves each group of tests (module-scoped fixtures).
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from benchmarks.programbench.official_eval import OfficialEvalResult
from benchmarks.programbench.program_user import PROGRAM_UID
from tests.security.scorer_support import FORCE_PASS_HOOKS, evaluate_files, raw_score_alongside

pytestmark = pytest.mark.docker

# Places inside the eval's image where a file steers the judge's Python, pytest, shell or
# loader, and the world-writable ones: committed data beside the tests, relative to the
# container's root (CONTAINER_ROOT joins them; nothing names this machine's files).
DATA = json.loads((Path(__file__).resolve().parents[1] / "data" / "judge"
                   / "steering_places.json").read_text())
CONTAINER_ROOT = PurePosixPath("/")
PLACES = [(entry["category"], str(CONTAINER_ROOT / entry["path"])) for entry in DATA["places"]]
SWEPT: list[str] = [str(CONTAINER_ROOT / rel) for rel in DATA["swept"]]

TRY = ('try() { mkdir -p "$(dirname "$1")" 2>/dev/null; '
       'if printf "#" >> "$1" 2>/dev/null; then echo "HXPLACE $1 written"; '
       'else echo "HXPLACE $1 denied"; fi; }\n')
PROGRAM = '''import os, signal, sys
pp = os.getppid()
while pp > 1 and b"pytest" not in open(f"/proc/{pp}/cmdline", "rb").read():
    pp = int(open(f"/proc/{pp}/stat").read().rsplit(")", 1)[1].split()[1])
def attempt(name, f):
    try:
        f()
        return f"{name}=reached"
    except OSError:
        return f"{name}=denied"
report = [f"uid={os.getuid()}",
          "swept=" + ("no" if os.path.exists("/tmp/programbench-grader-plugins") else "yes"),
          "race=" + ("lost" if os.path.exists("/var/tmp/hx_race") else "won"),
          attempt("runsh", lambda: open("/workspace/eval/run.sh", "a").write("#")),
          attempt("results", lambda: open("/workspace/eval/results.xml", "a").write("#")),
          attempt("rename", lambda: os.rename("/workspace/eval", "/workspace/eval.moved")),
          attempt("kill", lambda: os.kill(pp, signal.SIGSTOP)),
          attempt("environ", lambda: open(f"/proc/{pp}/environ", "rb").read()),
          attempt("mem", lambda: open(f"/proc/{pp}/mem", "rb")),
          attempt("etc", lambda: open("/etc/hx_steer", "w")),
          "cwd=" + attempt("x", lambda: open("/workspace/hx_out", "w").write("ok"))[2:]]
print("0 " + " ".join(report))
'''
PLACES_SUBMISSION = {
    "compile.sh": ("#!/bin/bash\n" + TRY
                   + "".join(f"try {p}\n" for _, p in PLACES)
                   + "".join(f"try {p}\n" for p in SWEPT)
                   # a process the build leaves behind, making its files again and again
                   + "setsid bash -c 'while :; do mkdir -p /var/tmp/hx_race; sleep 0.01; "
                   "done' </dev/null >/dev/null 2>&1 &\n"
                   + "printf '#!/bin/sh\\nexec python3 /workspace/program.py \"$@\"\\n' "
                   "> executable\nchmod +x executable\n"),
    "program.py": PROGRAM,
}


def _evaluate(tmp: Path, files: dict[str, str]) -> OfficialEvalResult:
    result: OfficialEvalResult = evaluate_files(tmp, files)
    return result


def _eval_json(result: OfficialEvalResult) -> dict[str, Any]:
    assert result.eval_json, result
    data: dict[str, Any] = json.loads(Path(result.eval_json).read_text())
    return data


@pytest.fixture(scope="module")
def places_eval(tmp_path_factory: pytest.TempPathFactory) -> tuple[OfficialEvalResult,
                                                                   dict[str, str], str]:
    result = _evaluate(tmp_path_factory.mktemp("places"), PLACES_SUBMISSION)
    data = _eval_json(result)
    compile_out = next(e["output"] for e in data["log"] if e["step"] == "compile")
    said = dict(line.split(" ")[1:3] for line in compile_out.splitlines()
                if line.startswith("HXPLACE "))
    failures = " ".join(str(r.get("extra", {})) for r in data["test_results"])
    return result, said, failures


@pytest.mark.parametrize(("category", "place"), PLACES,
                         ids=[f"{c}:{p}" for c, p in PLACES])
def test_the_build_cannot_write_a_place_that_steers_the_judge(
        places_eval: tuple[OfficialEvalResult, dict[str, str], str], category: str,
        place: str) -> None:
    result, said, _ = places_eval
    assert said.get(place) == "denied", f"the build wrote {place} ({category})"
    assert result.score == 0.0  # the program prints 0: what it earns


@pytest.mark.parametrize("place", SWEPT)
def test_what_the_build_left_in_a_world_writable_folder_is_gone_before_the_judge(
        places_eval: tuple[OfficialEvalResult, dict[str, str], str], place: str) -> None:
    result, said, failures = places_eval
    assert said.get(place) == "written"  # /tmp is the build's to use
    assert "swept=yes" in failures and "race=won" in failures, failures
    assert result.docker_policy is not None
    swept = result.docker_policy.program_files_swept  # a folder stands for what it holds
    assert any(place == s or place.startswith(s + "/") for s in swept), swept
    assert result.docker_policy.build_user == PROGRAM_UID


@pytest.mark.parametrize("target", ["runsh", "results", "rename", "kill", "environ", "mem",
                                    "etc"])
def test_the_program_under_test_cannot_reach_the_judge(
        places_eval: tuple[OfficialEvalResult, dict[str, str], str], target: str) -> None:
    _, _, failures = places_eval
    assert f"uid={PROGRAM_UID}" in failures, failures  # the tests ran it as the program user
    assert f"{target}=denied" in failures, failures
    assert "cwd=reached" in failures  # its working folder is its own to write


# The build moves root's home (in /etc/passwd) to a folder whose .profile makes every test
# pass: the tests' ``bash -lc`` runs it as the judge's login shell.
PASSWD_HOME = {
    "compile.sh": ("#!/bin/bash\nmkdir -p /workspace/h\n"
                   "cat > /workspace/h/.profile <<'P'\n"
                   "export PYTEST_ADDOPTS=\"$PYTEST_ADDOPTS -p forcepass_hooks\"\n"
                   "export PYTHONPATH=/workspace/h${PYTHONPATH:+:$PYTHONPATH}\nP\n"
                   "cp /workspace/forcepass_hooks.py /workspace/h/\n"
                   "sed -i 's#^root:\\([^:]*\\):0:0:\\([^:]*\\):/root:#"
                   "root:\\1:0:0:\\2:/workspace/h:#' /etc/passwd || true\n"
                   "cp program.sh executable\nchmod +x executable\n"),
    "forcepass_hooks.py": FORCE_PASS_HOOKS,
    "program.sh": "#!/bin/sh\necho 0\n",
}


def test_a_build_that_moves_roots_home_steers_nothing(tmp_path: Path) -> None:
    with raw_score_alongside(tmp_path / "control", PASSWD_HOME) as control:
        ours = _evaluate(tmp_path / "ours", PASSWD_HOME)
    assert control() == 1.0  # the bare official eval: the build, as root, moved the home
    assert (ours.official_eval_status, ours.score) == ("completed", 0.0)
