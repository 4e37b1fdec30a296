"""Helpers of the scorer-integrity attack tests (real Docker, real ``programbench eval``)."""

from __future__ import annotations

import base64
import http.server
import socketserver
import subprocess
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.fixture import ensure_fixture
from benchmarks.programbench.official_eval import evaluate_instance
from benchmarks.programbench.submission import build_submission

FIXTURE_IMAGE = "programbench/testorg_1776_calculator.abc1234:task_cleanroom_v6"
TARGET = "benchmarks/programbench"

# A root conftest.py whose hook wrapper turns every test report into a pass.
FORCE_PASS_CONFTEST = """import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""
# compile.sh of a program that always prints 42.
PRINT_42_COMPILE = "#!/bin/bash\nprintf '#!/bin/sh\\necho 42\\n' > executable\nchmod +x executable\n"


def agent_command(files: dict[str, str], extra: str = "") -> str:
    """A ``--agent-command`` writing ``files`` into /workspace (then running ``extra``)."""
    lines = ["set -e", "cd /workspace"]
    for rel, text in files.items():
        b64 = base64.b64encode(text.encode()).decode()
        lines += [f"mkdir -p \"$(dirname '{rel}')\"", f"echo {b64} | base64 -d > '{rel}'"]
        if rel.endswith(".sh"):
            lines.append(f"chmod +x '{rel}'")
    script = "\n".join(lines) + "\n" + extra
    return f"bash -c 'echo {base64.b64encode(script.encode()).decode()} | base64 -d | bash'"


def fixture_row(run) -> dict:  # type: ignore[no-untyped-def]
    return run.latest[FIXTURE_ID]


class _Recorder(http.server.BaseHTTPRequestHandler):
    hits: list[str]

    def do_GET(self) -> None:
        self.hits.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"reached\n")

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def http_recorder() -> Iterator[tuple[int, list[str]]]:
    """A loopback-only HTTP server (on this machine, all interfaces): ``(port, paths hit)``."""
    hits: list[str] = []
    handler = type("Handler", (_Recorder,), {"hits": hits})
    server = socketserver.ThreadingTCPServer(("0.0.0.0", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield server.server_address[1], hits
    finally:
        server.shutdown()
        server.server_close()


def bridge_gateway() -> str:
    """The host's address as a container on the default bridge sees it."""
    script = ("import socket,struct\n"
              "for l in open('/proc/net/route').readlines()[1:]:\n"
              "    f=l.split()\n"
              "    if f[1]=='00000000': print(socket.inet_ntoa(struct.pack('<L',int(f[2],16))))")
    out = subprocess.run(["docker", "run", "--rm", FIXTURE_IMAGE, "python3", "-c", script],
                         capture_output=True, text=True, timeout=120, check=True).stdout.strip()
    assert out, "no default route in a bridge container"
    return out


def fetch_script(url: str) -> str:
    """Shell that GETs ``url`` from inside a container (python3 is in the fixture image)."""
    return (f"python3 -c \"import urllib.request; urllib.request.urlopen('{url}', timeout=5)\""
            " >/dev/null 2>&1 || true")


def write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def raw_official_score(tmp: Path, files: dict[str, str]) -> float | None:
    """Control: the same files scored by the bare official CLI (real docker, no guard, no
    policy), as the issue measured it. None when it gave no verdict."""
    import os
    import tarfile

    from benchmarks.programbench import CLEANROOM_TAG
    from benchmarks.programbench.fixture import ensure_fixture
    from benchmarks.programbench.official_eval import (
        eval_json_path,
        programbench_cli,
        score_eval_json,
    )

    src = tmp / "raw-src"
    sub = src / FIXTURE_ID / "submission.tar.gz"
    sub.parent.mkdir(parents=True)
    with tarfile.open(sub, "w:gz") as tar:
        for rel, text in files.items():
            path = tmp / "raw-ws" / rel
            write(path, text, 0o755 if rel.endswith(".sh") else 0o644)
            tar.add(path, arcname=rel)
    env = {**os.environ, "PROGRAMBENCH_BLOB_DIR": ensure_fixture().blob_dir}
    env.pop("PROGRAMBENCH_DOCKER_EXECUTABLE", None)
    subprocess.run([*programbench_cli(), "eval", str(src), "--filter", f"^{FIXTURE_ID}$",
                    "--docker-cpus", "1", "--image-tag", CLEANROOM_TAG, "-w", "1", "-f"],
                   env=env, capture_output=True, timeout=900, check=False)
    eval_json = eval_json_path(src, FIXTURE_ID)
    return score_eval_json(FIXTURE_ID, eval_json).score if eval_json.exists() else None


@contextmanager
def raw_score_alongside(tmp: Path, files: dict[str, str]) -> Iterator[Callable[[], float | None]]:
    """:func:`raw_official_score` in a thread while the block runs (the harness's run of the
    same files); the callable it gives returns the control's score once the block is done."""
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(raw_official_score, tmp, files)
        yield future.result


def evaluate_files(tmp: Path, files: dict[str, str]) -> Any:
    """Our eval (the docker policy, the separated judge) of a submission of ``files`` at the
    fixture task: its ``OfficialEvalResult``. Its modules are imported with this one (not
    here: a control eval in a thread imports them at the same time)."""
    fixture = ensure_fixture()
    ws = tmp / "ws"
    for rel, text in files.items():
        write(ws / rel, text, 0o755 if rel.endswith(".sh") else 0o644)
    build_submission(ws, tmp / "src" / FIXTURE_ID / "submission.tar.gz")
    result = evaluate_instance(tmp / "src", FIXTURE_ID, blob_dir=fixture.blob_dir)
    import shutil

    shutil.rmtree(ws)
    return result


# A pytest plugin that makes every test pass (what a forgery would load into the judge).
FORCE_PASS_HOOKS = ("import pytest\n\n\n"
                    "@pytest.hookimpl(hookwrapper=True)\n"
                    "def pytest_runtest_makereport(item, call):\n"
                    "    outcome = yield\n"
                    "    outcome.get_result().outcome = 'passed'\n")
