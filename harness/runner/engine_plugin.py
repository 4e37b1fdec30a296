"""pytest plugin: one run over several Docker engines.

Options: ``--docker-host URL`` (repeatable) or ``--engines FILE`` (see
:mod:`harness.sandbox.engines`), and ``--instance-resources`` (the size of one instance,
:mod:`harness.sandbox.engine_capacity`). Without ``--docker-host``/``--engines`` nothing
here places: the run uses the local engine (asked once at admission).

* Admission (controller): every ``ssh://`` engine gets the run's tunnel
  (:mod:`harness.sandbox.ssh_tunnel`); every engine is probed (server version) and read
  (CPUs, free memory, free disk): its capacity is the most instances those allow, at most
  the configured one. Each reachable engine other than the controller's gets this run's
  lease (:mod:`harness.sandbox.lease`, renewed while the run lives) and the start-up sweep
  of dead runs' orphans. The engines are recorded in the manifest's ``engines`` and
  ``<run_root>/.harness/engines.json``; an unreachable engine is recorded and never used;
  none reachable refuses the run (``no_engine``), nor one with room for an instance
  (``no_engine_capacity``). Without ``--docker-host``/``--engines`` the local engine is
  asked once (``engine_unreachable``). What the options alone rule out (a gateway agent,
  or a relay, with a remote engine) was refused before, by
  :mod:`harness.runner.engine_admission`.
* Each instance (the autouse ``harness_engine`` fixture, set up before any other fixture
  and torn down after them): a slot on the least loaded live engine that is not under
  memory pressure (:mod:`harness.sandbox.placement`), made the process's active slot
  (clients and ``docker``/``programbench`` subprocesses are handed its engine;
  ``os.environ`` is not changed), the row's ``details.engine``. At teardown an engine that no
  longer answers is marked lost and the instance, if it did not settle, ends
  ``infra_failed`` ``engine_lost`` (retried by resume, which re-probes the engines and
  places it on one that answers).
* Session end and worker crashes: this run's labelled resources are swept on every engine
  that still answers (the controller's engine is swept by :mod:`harness.runner.sandbox_hooks`),
  after the engines' leases are released; the engine records gain their placement events
  (memory pressure, recovery) and leases. The tunnels close last (``pytest_unconfigure``),
  after the campaign's custody proof has asked every engine.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from harness.core.errors import InfraError, RefusalError
from harness.runner.engine_admission import OPTIONS
from harness.runner.worker import STATE_KEY

if TYPE_CHECKING:  # engines (pydantic records) and placement load when a run uses them
    import docker

    from harness.runner.instance import RunContext
    from harness.sandbox import placement
    from harness.sandbox.engine_capacity import EngineResources, InstanceNeeds
    from harness.sandbox.engines import EngineRecord, EngineSpec
    from harness.sandbox.lease import Lease
    from harness.sandbox.ssh_tunnel import SshTunnel

ENGINE_LOST = "engine_lost"
SLOT_KEY: pytest.StashKey[Any] = pytest.StashKey()  # the instance's placement.Slot
LEASE_TIMEOUT_S = 15  # a lease call on an engine that went away fails after this, not 120 s
_cache: dict[str, list[EngineRecord]] = {}
TUNNELS_KEY: pytest.StashKey[list[SshTunnel]] = pytest.StashKey()
LEASES_KEY: pytest.StashKey[dict[int, tuple[Lease, docker.DockerClient]]] = pytest.StashKey()


def run_engines(run_root: Any) -> list[EngineRecord]:
    from harness.sandbox.engines import read_engines

    key = str(run_root)
    if key not in _cache:
        _cache[key] = read_engines(run_root)
    return _cache[key]


# ---------------------------------------------------------------------------- admission


def _open_tunnels(config: pytest.Config, specs: list[EngineSpec]) -> dict[str, str]:
    """The run's tunnels to its ``ssh://`` engines (opened here, in the main thread: each
    ends with the thread that started it). Returns url -> error for those that failed."""
    from harness.sandbox.ssh_tunnel import SshTunnel, TunnelError

    tunnels = config.stash.setdefault(TUNNELS_KEY, [])
    failed: dict[str, str] = {}
    for spec in specs:
        if not spec.url.startswith("ssh://"):
            continue
        try:
            tunnels.append(SshTunnel.open(spec.url))
        except (TunnelError, OSError, ValueError) as exc:
            failed[spec.url] = f"{type(exc).__name__}: {exc}"[:300]
    return failed


def measure(engine: EngineSpec, run_id: str, run_root: Any) -> EngineResources:
    """One reading of ``engine`` (through :func:`engine_capacity.read_resources`)."""
    import os

    from harness.sandbox import engine_capacity
    from harness.sandbox import labels as L
    from harness.sandbox.engines import client_for

    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    labels = {**L.run_labels(run_id, "engine-probe", worker, run_root), L.TTL: "300"}
    client = client_for(engine, timeout=60)
    try:
        return engine_capacity.read_resources(
            client, engine.url, labels, L.resource_name("probe", run_id, worker)
        )
    finally:
        client.close()


def _size(records: list[EngineRecord], needs: InstanceNeeds, run: RunContext) -> None:
    """Read every reachable engine and set its admitted capacity (threads: the tunnels are
    open already)."""
    from concurrent.futures import ThreadPoolExecutor

    from harness.sandbox import engine_capacity as ec
    from harness.sandbox.placement import engines_dir

    live = [r for r in records if r.reachable]
    if not live:
        return
    with ThreadPoolExecutor(max_workers=min(8, len(live))) as pool:
        futures = {r.index: pool.submit(measure, r, run.run_id, run.run_root) for r in live}
    for record in records:
        record.max_capacity = record.capacity
    for record in live:
        record.instance = needs
        try:
            res = futures[record.index].result()
        except Exception as exc:
            record.reachable = False
            record.error = f"reading its resources: {type(exc).__name__}: {exc}"[:300]
            continue
        record.resources = res
        record.capacity, record.limited_by = ec.admitted_capacity(record.capacity, res, needs)
        ec.write_state(engines_dir(run.run_root), record.index, res, ec.memory_pressure(res, needs))


def _lease_engines(config: pytest.Config, run: RunContext, records: list[EngineRecord]) -> None:
    """This run's lease on every reachable engine other than the controller's, then the
    start-up sweep of dead runs' orphans there."""
    from harness.sandbox.cleanup import sweep_stale
    from harness.sandbox.engines import LOCAL, client_for
    from harness.sandbox.lease import Lease

    keep = bool(config.getoption("keep_sandboxes", False))
    leases = config.stash.setdefault(LEASES_KEY, {})
    for record in records:
        if record.url == LOCAL or not record.reachable:
            continue
        client = client_for(record, timeout=LEASE_TIMEOUT_S)
        try:
            lease = Lease(run.run_id, run.run_root, keep=keep, client=client).acquire()
        except Exception as exc:
            client.close()
            record.lease = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            continue
        leases[record.index] = (lease, client)
        record.lease = lease.record()
        try:
            record.lease["stale_runs_swept"] = sweep_stale(client=client)
        except Exception as exc:
            record.lease["startup_sweep_error"] = f"{type(exc).__name__}: {exc}"[:300]


def admit_engines(config: pytest.Config, run: RunContext) -> None:
    from harness.runner.engine_admission import check_local_engine, run_engines

    specs, needs = run_engines(config)  # the options were checked first (engine_admission)
    if not specs or needs is None:
        check_local_engine(config, run)  # the local engine only: it answers, or a refusal
        return
    from harness.sandbox.engine_capacity import describe_limits
    from harness.sandbox.engines import EngineRecord, brief_error, probe, write_engines

    failed = _open_tunnels(config, specs)
    via = {t.url: t.endpoint for t in config.stash.get(TUNNELS_KEY, [])}
    records = []
    for i, spec in enumerate(specs):
        if spec.url in failed:
            records.append(
                EngineRecord(**spec.model_dump(), index=i, reachable=False, error=failed[spec.url])
            )
            continue
        records.append(probe(spec, i, via=via.get(spec.url)))
    _size(records, needs, run)
    _lease_engines(config, run, records)
    write_engines(run.run_root, records)
    if run.manifest is not None:
        run.manifest.extra.engines = [r.model_dump(mode="json") for r in records]
    if not any(r.reachable for r in records):
        raise RefusalError(
            f"no engine of {OPTIONS} answers: "
            + "; ".join(f"{r.url}: {brief_error(r.error)}" for r in records)
            + f"; start them, or fix {OPTIONS}",
            stage="engines",
            reason="no_engine",
        )
    if not any(r.reachable and r.capacity > 0 for r in records):
        raise RefusalError(
            f"no engine of {OPTIONS} has room for one instance of "
            f"{needs.cpus:g} CPU(s), {needs.memory >> 20} MiB, {needs.disk >> 20} MiB of disk "
            "(--instance-resources): "
            + "; ".join(
                f"{r.url}: {describe_limits(r.resources, needs, r.limited_by or {})}"
                for r in records
                if r.reachable and r.resources is not None
            ),
            stage="engines",
            reason="no_engine_capacity",
        )


# ---------------------------------------------------------------------------- placement


def _lost(state: Any, slot: placement.Slot) -> None:
    """The engine stopped answering: mark it, and make an unsettled instance ``engine_lost``."""
    from harness.sandbox import placement

    placement.mark_lost(slot.run_root, slot.engine.index, "stopped answering during an instance")
    from harness.core.row_details import EngineDetails

    ctx = state.ctx
    if EngineDetails.read(ctx.result.details).lost:
        return  # already found lost (when its call failed)
    EngineDetails(lost=True).put(ctx.result.details)
    if (state.exc is not None and state.is_infra()) or ctx.result.outcome is None:
        previous = f"{type(state.exc).__name__}: {state.exc}"[:500] if state.exc else None
        if previous:
            EngineDetails(error=previous).put(ctx.result.details)
        state.exc = InfraError(f"engine {slot.engine.url} stopped answering", ENGINE_LOST)
        state.exc_phase = state.exc_phase or "call"


def _acquire(run_id: str, run_root: Any, engines: list[EngineRecord]) -> placement.Slot:
    from harness.sandbox import engine_capacity as ec
    from harness.sandbox import placement
    from harness.sandbox.engines import alive

    folder = placement.engines_dir(run_root)

    def pressure(engine: EngineRecord) -> str | None:
        if engine.resources is None or engine.instance is None:
            return None  # an engine not read at admission is not read now either
        return ec.engine_pressure(
            folder, engine.index, engine.instance, lambda: measure(engine, run_id, run_root)
        )

    return placement.acquire(run_root, engines, check=alive, pressure=pressure)


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
        slot = _acquire(ctx.run_id, ctx.run_root, engines)
    except placement.NoEngineLeft as exc:
        raise InfraError(str(exc), ENGINE_LOST) from exc
    from harness.core.row_details import EngineDetails

    EngineDetails(url=slot.engine.url, index=slot.engine.index).put(ctx.result.details)
    request.node.stash[SLOT_KEY] = slot
    try:
        with placement.placed(slot):
            yield slot.engine
            if slot.engine.url != LOCAL and not alive(slot.engine):
                _lost(state, slot)
    finally:
        slot.release()


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A call that failed on an engine that stopped answering is ``engine_lost`` when its
    report is made: innermost, so the worker's retry decision (``--retry-infra``) already
    sees the reason, and a lost engine's instance waits for a resume that re-places it."""
    report = yield
    slot = item.stash.get(SLOT_KEY, None)
    state = item.stash.get(STATE_KEY, None)
    if call.when == "call" and call.excinfo is not None and slot is not None and \
            state is not None:
        from harness.sandbox.engines import LOCAL, alive

        if slot.engine.url != LOCAL and not alive(slot.engine):
            if state.exc is None:
                state.observe("call", call.excinfo, 0.0)  # the worker adds the duration
            _lost(state, slot)
    return report


# ---------------------------------------------------------------------------- the end


def _sweep_engines(run: RunContext, worker: str | None = None) -> dict[str, Any]:
    from harness.sandbox.cleanup import sweep
    from harness.sandbox.engines import LOCAL, alive, client_for

    out: dict[str, Any] = {}
    for engine in run_engines(run.run_root):
        if engine.url == LOCAL or not engine.reachable:
            continue
        if not alive(engine):
            out[engine.url] = {"error": "engine does not answer"}
            continue
        client = client_for(engine)
        try:
            out[engine.url] = {"removed": sweep(run.run_id, worker, client=client, spare_kept=True)}
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
        extra.engine_sweeps = [
            *(extra.engine_sweeps or []),
            EngineSweep(worker=worker_id, engines=swept),
        ]


def _release_leases(
    config: pytest.Config, run_root: Any = None, *, release: bool
) -> dict[int, dict[str, Any]]:
    """Stop (and with ``release`` remove; a kept lease stays) the engines' leases; on an
    engine marked lost the lease is only stopped (it expires there, or the next start-up
    sweep of a run on that engine removes it)."""
    leases = config.stash.get(LEASES_KEY, {})
    if not leases:  # none taken (a collection, a dry run): the placement models stay unloaded
        return {}
    from harness.sandbox import placement

    out: dict[int, dict[str, Any]] = {}
    for index, (lease, client) in list(leases.items()):
        lost = run_root is not None and placement.is_lost(run_root, index)
        try:
            if release and not lost:
                lease.release()
            else:
                lease.stop()
            out[index] = {**lease.record(), **({"left_on_lost_engine": True} if lost else {})}
        except Exception as exc:  # an engine gone: its lease expires by itself
            out[index] = {**lease.record(), "release_error": f"{type(exc).__name__}: {exc}"[:300]}
        finally:
            client.close()
    config.stash[LEASES_KEY] = {}
    return out


def pytest_harness_session_finish(
    config: pytest.Config, run: RunContext, summary: dict[str, Any]
) -> None:
    engines = run_engines(run.run_root)
    if not engines:
        return
    leases = _release_leases(config, run.run_root, release=True)
    if run.manifest is None:
        return
    from harness.sandbox import placement
    from harness.sandbox.engine_capacity import read_events

    events = read_events(placement.engines_dir(run.run_root))
    records = []
    for engine in engines:
        mine = [e for e in events if e.engine == engine.index]
        records.append(
            engine.model_copy(
                update={
                    "lease": {**(engine.lease or {}), **leases.get(engine.index, {})} or None,
                    "events": mine or None,
                }
            ).model_dump(mode="json")
        )
    run.manifest.extra.engines = records
    if config.getoption("keep_sandboxes", False):
        return
    run.manifest.extra.engine_final = _sweep_engines(run)
    lost = [e.url for e in engines if placement.is_lost(run.run_root, e.index)]
    run.manifest.extra.engines_lost = lost


def pytest_unconfigure(config: pytest.Config) -> None:
    _release_leases(config, release=False)  # a run that never finished: its leases expire
    for tunnel in config.stash.get(TUNNELS_KEY, []):
        tunnel.close()
    config.stash[TUNNELS_KEY] = []
