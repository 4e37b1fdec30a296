"""pytest plugin: one run over several Docker engines.

Options: ``--docker-host URL`` (repeatable) or ``--engines FILE`` (see
:mod:`harness.sandbox.engines`). Without them nothing here acts: the run uses the local
engine exactly as before.

* Admission (controller): every engine is probed (server version) and recorded in the
  manifest's ``engines`` and ``<run_root>/.harness/engines.json``; an unreachable engine
  is recorded and never used; none reachable refuses the run (``no_engine``).
* Each instance (the autouse ``harness_engine`` fixture, set up before any other fixture
  and torn down after them): a slot on the least loaded live engine
  (:mod:`harness.sandbox.placement`), ``DOCKER_HOST`` pointed at it, the row's
  ``details.engine``. At teardown an engine that no longer answers is marked lost and the
  instance, if it did not settle, ends ``infra_failed`` ``engine_lost`` (retried by resume,
  which re-probes the engines and places it on one that answers).
* Session end and worker crashes: this run's labelled resources are swept on every engine
  that still answers (the controller's engine is swept by :mod:`harness.runner.sandbox_hooks`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from harness.core.errors import InfraError, RefusalError
from harness.runner.worker import STATE_KEY

if TYPE_CHECKING:  # engines (pydantic records) and placement load when a run uses them
    from harness.runner.instance import RunContext
    from harness.sandbox import placement
    from harness.sandbox.engines import EngineRecord

ENGINE_LOST = "engine_lost"
_cache: dict[str, list[EngineRecord]] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("harness")
    group.addoption("--docker-host", action="append", default=[], metavar="URL",
                    help="run instances on this Docker engine (repeatable; unix://, tcp://, "
                         "ssh://); capacity = the worker count each")
    group.addoption("--engines", default=None, metavar="FILE",
                    help="TOML/JSON list of engines: url, capacity (concurrent instances), "
                         "labels")


def run_engines(run_root: Any) -> list[EngineRecord]:
    from harness.sandbox.engines import read_engines

    key = str(run_root)
    if key not in _cache:
        _cache[key] = read_engines(run_root)
    return _cache[key]


def pytest_harness_admit(config: pytest.Config, run: RunContext) -> None:
    from harness.sandbox.engines import EngineError, engine_specs, probe, write_engines

    hosts = list(config.getoption("docker_host", None) or [])
    workers = int(getattr(config.option, "numprocesses", 0) or 0) or 1
    try:
        specs = engine_specs(hosts, config.getoption("engines", None), workers)
    except EngineError as exc:
        raise RefusalError(str(exc), stage="engines", reason="bad_engines") from exc
    if not specs:
        return
    records = [probe(spec, i) for i, spec in enumerate(specs)]
    write_engines(run.run_root, records)
    if run.manifest is not None:
        run.manifest.extra.engines = [r.model_dump(mode="json") for r in records]
    if not any(r.reachable for r in records):
        raise RefusalError("no engine of --docker-host/--engines answers: "
                           + "; ".join(f"{r.url}: {r.error}" for r in records),
                           stage="engines", reason="no_engine")


def _lost(state: Any, slot: placement.Slot) -> None:
    """The engine stopped answering: mark it, and make an unsettled instance ``engine_lost``."""
    from harness.sandbox import placement

    placement.mark_lost(slot.run_root, slot.engine.index, "stopped answering during an instance")
    ctx = state.ctx
    ctx.result.details["engine_lost"] = True
    if (state.exc is not None and state.is_infra()) or ctx.result.outcome is None:
        previous = f"{type(state.exc).__name__}: {state.exc}"[:500] if state.exc else None
        if previous:
            ctx.result.details["engine_error"] = previous
        state.exc = InfraError(f"engine {slot.engine.url} stopped answering", ENGINE_LOST)
        state.exc_phase = state.exc_phase or "call"


@pytest.fixture(autouse=True)
def harness_engine(request: pytest.FixtureRequest) -> Iterator[EngineRecord | None]:
    """The engine this instance runs on (None: the local engine, no placement)."""
    state = request.node.stash.get(STATE_KEY, None)
    if state is None:
        yield None
        return
    ctx = state.ctx
    engines = run_engines(ctx.run_root)
    if not engines or ctx.dry_run or ctx.key in ctx.run.plan.carried:
        yield None
        return
    from harness.sandbox import placement
    from harness.sandbox.engines import LOCAL, alive

    try:
        slot = placement.acquire(ctx.run_root, engines)
    except placement.NoEngineLeft as exc:
        raise InfraError(str(exc), ENGINE_LOST) from exc
    ctx.result.details["engine"] = {"url": slot.engine.url, "index": slot.engine.index}
    try:
        with placement.placed(slot):
            yield slot.engine
            if slot.engine.url != LOCAL and not alive(slot.engine.url):
                _lost(state, slot)
    finally:
        slot.release()


def _sweep_engines(run: RunContext, worker: str | None = None) -> dict[str, Any]:
    from harness.sandbox.cleanup import sweep
    from harness.sandbox.engines import LOCAL, alive, client_for

    out: dict[str, Any] = {}
    for engine in run_engines(run.run_root):
        if engine.url == LOCAL or not engine.reachable:
            continue
        if not alive(engine.url):
            out[engine.url] = {"error": "engine does not answer"}
            continue
        client = client_for(engine.url)
        try:
            out[engine.url] = {"removed": sweep(run.run_id, worker, client=client,
                                                spare_kept=True)}
        except Exception as exc:
            out[engine.url] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        finally:
            client.close()
    return out


def pytest_harness_worker_crashed(config: pytest.Config, run: RunContext, worker_id: str) -> None:
    if config.getoption("keep_sandboxes", False) or run.manifest is None:
        return
    swept = _sweep_engines(run, worker_id)
    if swept:
        from harness.core.models import EngineSweep

        extra = run.manifest.extra
        extra.engine_sweeps = [*(extra.engine_sweeps or []),
                               EngineSweep(worker=worker_id, engines=swept)]


def pytest_harness_session_finish(config: pytest.Config, run: RunContext,
                                  summary: dict[str, Any]) -> None:
    if config.getoption("keep_sandboxes", False) or run.manifest is None:
        return
    engines = run_engines(run.run_root)
    if not engines:
        return
    run.manifest.extra.engine_final = _sweep_engines(run)
    from harness.sandbox import placement

    lost = [e.url for e in engines if placement.is_lost(run.run_root, e.index)]
    run.manifest.extra.engines_lost = lost
