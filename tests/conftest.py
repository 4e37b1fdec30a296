"""Project-wide test configuration (kept small).

* Session-end leak check: after the whole run (in the xdist controller, or the single
  process), no container, network or volume labelled ``harness.run`` may remain whose
  ``harness.run_root`` lies under this session's pytest base temp directory. That
  scopes the check to runs this session created (its tests' run roots are all under
  tmp_path, also in xdist workers and pytester runs), so other engineers' concurrent
  runs on the same Docker engine are never counted nor touched. Leaks fail the session
  (exit 1) and are then swept. Skipped when the Docker daemon is unreachable (tests
  that need Docker fail loudly on their own).
* The slow tier: tests marked ``slow`` are left out of a run unless it is given ``--slow``
  (``pytest tests -n 3 --slow -m slow`` runs only them; CI runs them after the default run).
  They are reported as deselected, never as passed.
* Slow tests first (``pytest -n N``): see :func:`_slow_first`.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from harness.core.cache import cache_root

# The tests start many Python processes (xdist workers, the fork server of
# tests.support.forkrun, the pytest runs of the plugin tests). Where the environment
# turns bytecode caching off (PYTHONDONTWRITEBYTECODE), every one of them compiled every
# module again: about 0.2 s a process. They cache it outside the source tree instead.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    os.environ.setdefault("PYTHONPYCACHEPREFIX", str(cache_root() / "pycache"))


def _memory_tmp() -> str | None:
    """The machine's memory-backed scratch folder (``/dev/shm``, a writable tmpfs mounted
    without ``noexec``), if it has one."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        fields = line.split()
        if len(fields) >= 4 and fields[1] == "/dev/shm" and fields[2] == "tmpfs" \
                and "noexec" not in fields[3].split(",") and os.access("/dev/shm", os.W_OK):
            return "/dev/shm"
    return None


# The tests' temporary folders (every run root, ledger and manifest they write) go to memory
# where the machine has a tmpfs for it and TMPDIR is not set: a disk's fsyncs and journal
# commits cost about a tenth of the Docker-free loop here. What the tests check of the files
# (atomic renames, write order, what a killed process leaves) is the same on tmpfs.
if "TMPDIR" not in os.environ and (_shm := _memory_tmp()) is not None:
    os.environ["TMPDIR"] = tempfile.tempdir = _shm  # its processes, and this one (cached)

NO_DOCKER = "unix:///nonexistent/harness-test-not-marked-docker.sock"
# Fixtures that reach the Docker engine: a test using one is a Docker test by construction.
DOCKER_FIXTURES = frozenset(
    {"sandbox_client", "sandbox_base_image", "sandbox_image", "sandbox_factory", "sandbox",
     "docker_client", "base_image", "pb_fixture", "own_run", "oracle_run"}
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("harness-tests").addoption(
        "--slow", action="store_true",
        help="also run the slow tier (tests marked slow: image builds and pulls, other engines "
             "and runtimes, record-and-replay pairs, a real browser, a pip install); -m slow "
             "alone, or a test named by its node id, runs them too")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = getattr(item, "fixturenames", ())
        if DOCKER_FIXTURES.intersection(names):
            item.add_marker(pytest.mark.docker)


# How many tests of the slow tier a run left out (of those -m and -k kept). Under xdist the
# workers collect: each sends its count to the controller (``workeroutput``), which prints it.
SLOW_LEFT_OUT = pytest.StashKey[int]()


def _slow_tier_wanted(config: pytest.Config) -> bool:
    """--slow, a -m expression that names the tier, or a test named by its node id."""
    return (bool(config.getoption("slow")) or "slow" in (config.getoption("markexpr") or "")
            or any("::" in arg for arg in config.args))


def _leave_out_slow(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _slow_tier_wanted(config):
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]
    config.stash[SLOW_LEFT_OUT] = len(slow)


def pytest_report_header(config: pytest.Config) -> str | None:
    if _slow_tier_wanted(config):
        return None
    return "slow tier left out (tests marked slow): --slow runs it too, --slow -m slow only it"


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    output = getattr(node, "workeroutput", {})
    config = getattr(node, "config", None)
    if config is not None and "slow_left_out" in output:
        config.stash[SLOW_LEFT_OUT] = max(config.stash.get(SLOW_LEFT_OUT, 0),
                                          output["slow_left_out"])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter,
                            config: pytest.Config) -> None:
    left_out = config.stash.get(SLOW_LEFT_OUT, 0)
    if left_out:
        tests = "test" if left_out == 1 else "tests"
        terminalreporter.write_line(
            f"slow tier: {left_out} {tests} marked slow left out of this run "
            "(CI runs them: pytest tests -n 3 --slow -m slow)")


# Seconds a test took in a full run (setup, call and teardown; the slowest ones only, a
# test not listed counts as fast). Only the order of the run depends on it.
DURATIONS = Path(__file__).with_name("durations.json")


class _LeaveOutSlowThenOrder:
    @pytest.hookimpl(trylast=True)  # after -m/-k deselection: the list xdist schedules
    def pytest_collection_modifyitems(self, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        _leave_out_slow(config, items)  # the slow tier, of what -m and -k kept
        # Only in an xdist worker (it collects; the controller schedules what it sends).
        # The worker's own ``dist`` option reads "no": the order is made for ``load``, the
        # default, and harmless under the other modes.
        workerinput = getattr(config, "workerinput", None)
        if workerinput is None:
            return  # one process: the order does not change its length
        known = json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}
        items[:] = _slow_first(items, known, int(workerinput["workercount"]),
                               config.getoption("maxschedchunk", None))


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_LeaveOutSlowThenOrder(), "harness-tests-slow-first")


# Session fixtures that cost seconds to set up in each worker that uses one (a Chromium): the
# tests using one are moved together, to one worker.
ONE_WORKER_FIXTURES = frozenset({"browser"})


def _keys(item: pytest.Item) -> list[str]:
    """What ties ``item`` to other tests: its module, when it uses a module-scoped (or wider)
    fixture of its own module (one setup in one worker), and each of
    :data:`ONE_WORKER_FIXTURES` it uses. A test with no key is moved on its own."""
    module = item.nodeid.split("::", 1)[0]
    keys = [f"fixture:{name}" for name in sorted(
        ONE_WORKER_FIXTURES.intersection(getattr(item, "fixturenames", ())))]
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        if any(d.scope != "function" and d.baseid == module for d in defs):
            return [module, *keys]
    return keys


def _units(items: list[pytest.Item]) -> dict[str, list[pytest.Item]]:
    """The tests that move together (tied by a key of :func:`_keys`, directly or through
    another test), in collection order, each unit named by its first key or node id."""
    parent: dict[str, str] = {}

    def find(key: str) -> str:
        while parent.setdefault(key, key) != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    names: list[str] = []
    for item in items:
        keys = _keys(item) or [item.nodeid]
        for key in keys[1:]:
            a, b = find(keys[0]), find(key)
            if a != b:
                parent[b] = a
        names.append(keys[0])
    units: dict[str, list[pytest.Item]] = {}
    for name, item in zip(names, items, strict=True):
        units.setdefault(find(name), []).append(item)
    return units


def _slow_first(items: list[pytest.Item], known: dict[str, float], workers: int,
                maxchunk: int | None) -> list[pytest.Item]:
    """The known-slow tests, balanced over the workers, at the front of each worker's first
    batch, so that ``-n N`` does not end on one long test.

    xdist's ``load`` scheduling gives each worker, in turn, a batch of consecutive tests
    (``len(items) // workers // 4`` of them, at most ``--maxschedchunk``), then more as
    it drains. The slow units are dealt longest first to the least loaded worker's batch.
    """
    units = _units(items)
    cost = {k: sum(known.get(i.nodeid, 0.0) for i in v) for k, v in units.items()}
    slow = sorted((k for k in units if cost[k] > 0), key=lambda k: -cost[k])
    if workers < 2 or not slow:
        return items
    chunk = max(min(len(items) // workers // 4, maxchunk or len(items)), 2)
    batches: list[list[pytest.Item]] = [[] for _ in range(workers)]
    load = [0.0] * workers
    later: list[pytest.Item] = []  # slow units past the first batches, longest first
    for key in slow:
        room = [w for w in range(workers) if len(batches[w]) + len(units[key]) <= chunk]
        if not room:
            later += units[key]
            continue
        w = min(room, key=lambda w: load[w])
        batches[w] += units[key]
        load[w] += cost[key]
    rest = [i for k, v in units.items() if cost[k] <= 0 for i in v]
    ordered: list[pytest.Item] = []
    for batch in batches:  # each batch filled up to its size with fast tests
        fill = chunk - len(batch)
        ordered += batch + rest[:fill]
        rest = rest[fill:]
    return ordered + later + rest


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
        config.workeroutput["slow_left_out"] = config.stash.get(SLOW_LEFT_OUT, 0)  # type: ignore[attr-defined]
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
