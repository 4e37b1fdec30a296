"""Run the attack tests under another OCI runtime (gVisor's ``runsc``) as well.

``HARNESS_TEST_RUNTIME=runsc python -m pytest -p no:cacheprovider tests/security`` runs
every attack whose harness run passes ``*security_runtime_args()`` to ``run_pytest`` with
``--runtime runsc``: the agent's sandbox is then a gVisor sandbox (``scripts/setup.sh``
registers it; an unregistered name makes each run refused, so the tests fail loudly).
Unset or empty: the daemon's default runtime (runc). Usage in an attack test::

    from tests.security.runtime_support import security_runtime_args

    run = run_pytest("benchmarks/programbench", root, "--pb-fixtures", "-k", "calculator",
                     "--agent", "command", "--agent-command", attack,
                     *security_runtime_args())
"""

from __future__ import annotations

import os

RUNTIME_ENV = "HARNESS_TEST_RUNTIME"


def security_runtime() -> str | None:
    """The runtime named by ``HARNESS_TEST_RUNTIME`` (None: the daemon's default)."""
    name = os.environ.get(RUNTIME_ENV, "").strip()
    return name or None


def security_runtime_args() -> list[str]:
    """``["--runtime", NAME]`` when ``HARNESS_TEST_RUNTIME`` names one, else ``[]``."""
    name = security_runtime()
    return ["--runtime", name] if name else []
