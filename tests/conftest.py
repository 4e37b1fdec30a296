"""Project-wide test configuration (kept small).

* Session-end leak check: after the whole run (in the xdist controller, or the single
  process), no container, network or volume labelled ``harness.run`` may remain whose
  ``harness.run_root`` lies under this session's pytest base temp directory. That
  scopes the check to runs this session created (its tests' run roots are all under
  tmp_path, also in xdist workers and pytester runs), so other engineers' concurrent
  runs on the same Docker engine are never counted nor touched. Leaks fail the session
  (exit 1) and are then swept. Skipped when the Docker daemon is unreachable (tests
  that need Docker fail loudly on their own).
"""

from __future__ import annotations

import os

import pytest

from harness.core.cache import cache_root

# The tests start many Python processes (xdist workers, the fork server of
# harness.testing.forkrun, the pytest runs of the plugin tests). Where the environment
# turns bytecode caching off (PYTHONDONTWRITEBYTECODE), every one of them compiled every
# module again: about 0.2 s a process. They cache it outside the source tree instead.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    os.environ.setdefault("PYTHONPYCACHEPREFIX", str(cache_root() / "pycache"))

NO_DOCKER = "unix:///nonexistent/harness-test-not-marked-docker.sock"
# Fixtures that reach the Docker engine: a test using one is a Docker test by construction.
DOCKER_FIXTURES = frozenset(
    {"sandbox_client", "sandbox_base_image", "sandbox_image", "sandbox_factory", "sandbox",
     "docker_client", "base_image", "pb_fixture", "own_run"}
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = getattr(item, "fixturenames", ())
        if DOCKER_FIXTURES.intersection(names):
            item.add_marker(pytest.mark.docker)


@pytest.fixture(autouse=True)
def _docker_only_for_docker_tests(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test without the ``docker`` marker cannot reach the engine: DOCKER_HOST points nowhere.

    This is what keeps ``pytest tests -m "not docker"`` honest on a machine without Docker:
    a test that needs the engine but forgot its marker fails here too, loudly.
    """
    if request.node.get_closest_marker("docker") is None:
        monkeypatch.setenv("DOCKER_HOST", NO_DOCKER)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller checks once all workers are done
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is None:
        return
    from harness.sandbox.cleanup import leaked_resources, sweep
    from harness.sandbox.errors import SandboxError

    try:
        from harness.sandbox.client import get_client

        client = get_client(timeout=30)
        base = factory.getbasetemp()
        leaked = leaked_resources(client, run_root_under=base)
    except SandboxError:
        return
    found = [f"{kind[:-1]} {name}" for kind, names in leaked.items() for name in names]
    if not found:
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    message = f"LEAKED Docker resources of this test session ({len(found)}): " + "; ".join(found)
    if reporter is not None:
        reporter.write_line(message, red=True, bold=True)
    runs = {name.rsplit(" (", 1)[1].rstrip(")") for names in leaked.values() for name in names}
    for run_id in runs:
        try:
            sweep(run_id, client=client)
        except SandboxError as exc:
            if reporter is not None:
                reporter.write_line(f"sweep of {run_id} failed: {exc}", red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
