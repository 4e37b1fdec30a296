"""How the official ``programbench`` CLI is started: its interpreter and ``--docker-cpus``.

Light on purpose (no pydantic, no Docker SDK): the adapter checks these at admission, and
collection must not load the heavy modules.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path


class CliSetupError(RuntimeError):
    """The official CLI cannot be started as configured; the message names the fix."""


def programbench_cli() -> list[str]:
    """argv prefix of the official CLI: ``$PROGRAMBENCH_PYTHON -m programbench`` when that
    names another Python (the specification's: the runner's own cannot run the CLI), else
    this interpreter's."""
    import importlib.util

    other = os.environ.get("PROGRAMBENCH_PYTHON", "").strip()
    if other:
        path = shutil.which(other)
        if path is None:
            raise CliSetupError(f"PROGRAMBENCH_PYTHON={other} is not an executable Python; "
                                f"set it to a Python 3.11+ with programbench installed, or "
                                f"unset it to use {sys.executable}")
        return [path, "-m", "programbench"]
    if importlib.util.find_spec("programbench.__main__") is not None:
        return [sys.executable, "-m", "programbench"]
    script = Path(sys.executable).parent / "programbench"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-c", "from programbench.cli.main import app; app()"]


SPEC_DOCKER_CPUS = 4  # the specification's eval default


def default_docker_cpus(env: Mapping[str, str] | None = None) -> int:
    """``--docker-cpus`` for ``programbench eval``: ``$PROGRAMBENCH_DOCKER_CPUS``, else the
    specification's 4; capped at this host's CPUs (the engine refuses more than it has)."""
    env = os.environ if env is None else env
    raw = env.get("PROGRAMBENCH_DOCKER_CPUS", "").strip()
    want = SPEC_DOCKER_CPUS
    if raw:
        try:
            want = int(raw)
        except ValueError:
            raise CliSetupError(f"PROGRAMBENCH_DOCKER_CPUS={raw} is not a whole number; set "
                                f"it to e.g. 4, or unset it") from None
        if want < 1:
            raise CliSetupError(f"PROGRAMBENCH_DOCKER_CPUS={raw} must be 1 or more")
    return max(1, min(want, os.cpu_count() or 1))


