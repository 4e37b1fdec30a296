"""Several commands in one exec (:func:`harness.sandbox.execution.run_stages`): one result
per stage, each as if it had been its own exec; a failure ends the chain."""

from __future__ import annotations

import pytest

from harness.sandbox.container import Sandbox
from harness.sandbox.execution import _split_stages

TOKEN = "0123456789abcdef"


def _sh(body: str, *args: str) -> list[str]:
    return ["sh", "-c", body, "sh", *args]


def test_split_stages_keeps_each_stage_bytes() -> None:
    data = f"a\n\n{TOKEN} 0 0\nnoeol\n{TOKEN} 1 3\n".encode()
    assert _split_stages(data, TOKEN, 3) == [(b"a\n", 0), (b"noeol", 3), (b"", None)]
    # No end line: the stage got whatever followed the previous one.
    assert _split_stages(f"\n{TOKEN} 0 0\npartial".encode(), TOKEN, 2) == [
        (b"", 0),
        (b"partial", None),
    ]


@pytest.mark.docker
def test_stages_report_like_separate_execs(sandbox: Sandbox) -> None:
    results = sandbox.exec_stages(
        [
            _sh('echo "a $1"; echo e >&2', "x y'z"),
            _sh("printf out; printf err >&2"),
            _sh("id -u; pwd; exit 3"),
            _sh("echo never"),
        ],
        user="root",
        timeout=60,
    )
    assert [(r.exit_code, r.stdout, r.stderr) for r in results] == [
        (0, b"a x y'z\n", b"e\n"),
        (0, b"out", b"err"),
        (3, b"0\n/workspace\n", b""),
        (None, b"", b""),
    ]


@pytest.mark.docker
def test_stage_timeout_is_the_running_stage(sandbox: Sandbox) -> None:
    first, second, third = sandbox.exec_stages(
        [_sh("echo ok"), _sh("echo started; sleep 30"), _sh("echo never")], user="agent", timeout=3
    )
    assert (first.exit_code, first.stdout, first.timed_out) == (0, b"ok\n", False)
    assert second.timed_out and second.stdout == b"started\n" and not second.ok
    assert (third.exit_code, third.stdout) == (None, b"")
