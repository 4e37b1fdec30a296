"""``harness campaign reconcile|show|migrate``: clear a crashed run's custody, show a
campaign, move a campaign file to PostgreSQL. Each takes a campaign file or a campaign URL
(``postgresql://...?campaign=NAME`` or ``env:NAME``, see :mod:`.pgurl`).

Reconcile proves the crashed run left no container and no network behind (Docker, by the
sandbox layer's exact label ``harness.run=<run_id>``; the run id comes from
``<run_root>/run_manifest.json``), then records the operator's reading and moves the entry
into ``runs`` as ``reconciled``. Docker (and :mod:`harness.sandbox`, which imports it) is
imported only when reconciling.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError, RefusalError

from . import custody
from . import errors as E
from .campaign import Campaign
from .models import ActiveRun, CampaignState, RunRecord
from .pgurl import is_campaign_url

MANIFEST_FILE = "run_manifest.json"
STAGE = "campaign_reconcile"


def _refuse(reason: str, message: str) -> RefusalError:
    return RefusalError(message, stage=STAGE, reason=reason, exit_code=2)


def run_id_of(run_root: str | os.PathLike[str]) -> str:
    """The run id recorded in ``<run_root>/run_manifest.json``."""
    manifest = Path(run_root) / MANIFEST_FILE
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _refuse(
            "run_manifest_missing",
            f"{manifest} is missing: cannot tell which run {run_root} was, so its "
            "containers cannot be checked (pass the run root the crashed run wrote)",
        ) from None
    except (OSError, ValueError) as exc:
        raise _refuse("run_manifest_unreadable", f"{manifest} is unreadable: {exc}") from exc
    run_id = data.get("run_id") if isinstance(data, dict) else None
    if not isinstance(run_id, str) or not run_id:
        raise _refuse("run_manifest_unreadable", f"{manifest} has no run_id")
    return run_id


def resources_left(run_id: str, client: Any = None) -> dict[str, list[str]]:
    """Names of every container (running or not) and every network labelled
    ``harness.run=<run_id>``, from a fresh query; RefusalError when Docker cannot tell.
    ``kept`` describes the containers among them kept for a reattach (a paid task may still
    work in them), as :func:`kept_note` words them."""
    try:
        # lazy: harness.sandbox imports docker, which pure budget logic never needs
        from harness.sandbox import labels as L
        from harness.sandbox.client import get_client

        if client is None:
            client = get_client()
        label = {"label": f"{L.RUN}={run_id}"}
        containers = client.containers.list(all=True, filters=label)
        networks = client.networks.list(filters=label)
    except Exception as exc:  # any Docker failure means nothing is proven
        raise _refuse(
            "docker_unavailable",
            f"cannot list containers and networks of run {run_id} ({type(exc).__name__}: "
            f"{exc}); Docker must prove none is left",
        ) from exc
    kept = [kept_note(c) for c in containers if _labels(c).get(L.REATTACH)]
    return {
        "containers": sorted(str(getattr(c, "name", c)) for c in containers),
        "networks": sorted(str(getattr(n, "name", n)) for n in networks),
        "kept": sorted(kept),
    }


def _labels(container: Any) -> dict[str, str]:
    attrs = getattr(container, "attrs", None) or {}
    labels = (attrs.get("Config") or {}).get("Labels") or getattr(container, "labels", None)
    return dict(labels or {})


def kept_note(container: Any) -> str:
    """``<name> (instance X, its TTL ends <UTC time>, in N h)`` of a kept sandbox."""
    from harness.sandbox import labels as L
    from harness.sandbox.lease import parse_engine_time

    labels = _labels(container)
    attrs = getattr(container, "attrs", None) or {}
    state = attrs.get("State")
    started = (state.get("StartedAt") if isinstance(state, dict) else None) or attrs.get("Created")
    begun = parse_engine_time(started)
    note = f"{getattr(container, 'name', container)} (instance {labels.get(L.INSTANCE, '?')}"
    try:
        ttl = float(labels.get(L.TTL, ""))
    except ValueError:
        ttl = None
    if begun is not None and ttl is not None:
        ends = begun + ttl
        left_h = max(0.0, ends - time.time()) / 3600
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ends))
        note += f", its TTL ends {stamp}, in {left_h:.1f} h"
    return note + ")"


def custody_resources_left(
    run_ids: Sequence[str],
    run_roots: Sequence[str | os.PathLike[str]],
    docker_client: Any = None,
) -> dict[str, list[str]]:
    """What :func:`resources_left` finds for every run id, on the local engine (or
    ``docker_client``) and on every other engine any of ``run_roots`` placed instances on
    (``--docker-host``/``--engines``: their ``engines.json``)."""
    left: dict[str, list[str]] = {"containers": [], "networks": [], "kept": []}
    engines: list[str] = []
    if docker_client is None:
        from harness.sandbox.engines import LOCAL, read_engines

        for root in run_roots:
            for engine in read_engines(os.fspath(root)):
                if engine.url != LOCAL and engine.url not in engines:
                    engines.append(engine.url)
    for run_id in dict.fromkeys(run_ids):
        for kind, names in resources_left(run_id, docker_client).items():
            left[kind] += names
        for url in engines:
            from harness.sandbox.engines import client_for

            try:
                client = client_for(url)
            except Exception as exc:  # an engine we cannot reach proves nothing
                raise _refuse(
                    "docker_unavailable",
                    f"cannot reach engine {url} of run {run_id} ({type(exc).__name__}: "
                    f"{exc}); every engine the run used must prove nothing is left",
                ) from exc
            try:
                more = resources_left(run_id, client)
            finally:
                client.close()
            for kind, names in more.items():
                left[kind] += [f"{n} (on {url})" for n in names]
    return left


def leftovers_refusal(
    run_id: str, left: dict[str, list[str]], *, way_out: WayOut | None = None
) -> RefusalError | None:
    """The refusal naming what a run left (None when nothing is left); kept sandboxes come
    with the ways out and what each costs."""
    if not left["containers"] and not left["networks"]:
        return None
    named = [f"container {n}" for n in left["containers"]]
    named += [f"network {n}" for n in left["networks"]]
    kept = left.get("kept") or []
    if kept:
        w = way_out or WayOut(run_id=run_id)
        return _refuse(
            "sandboxes_kept",
            f"run {run_id} keeps {len(kept)} sandbox(es) for a reattach, a paid agent task "
            f"may still work in them: {'; '.join(kept)}. Ways out: "
            f"(1) resume the run: {w.resume_command()} -- the resume takes the campaign "
            "custody over and reattaches to the same task: the paid task continues and its "
            "spend is counted once; "
            f"(2) harness sweep --run {run_id}, then reconcile again -- kills the task: the "
            "spend so far is lost (paid, never scored); "
            "(3) wait until the TTL ends (the task may go on spending until then), then "
            "reconcile again",
        )
    reason = "containers_left" if left["containers"] else "networks_left"
    return _refuse(
        reason,
        f"run {run_id} still has {len(named)} resource(s) labelled harness.run={run_id}: "
        f"{', '.join(named)}; remove them (harness sweep --run {run_id}) and reconcile again",
    )


@dataclass(frozen=True)
class WayOut:
    """What the reconcile refusal needs to name the resume of a run."""

    run_id: str
    run_root: str | None = None
    benchmarks: tuple[str, ...] = ()
    campaign_file: str | None = None

    def resume_command(self) -> str:
        target = " ".join(f"benchmarks/{b}" for b in self.benchmarks) or "benchmarks/<name>"
        root = self.run_root or "<run root>"
        flag = "--campaign-url" if is_campaign_url(self.campaign_file or "") else "--campaign-file"
        campaign = f" {flag} {self.campaign_file}" if self.campaign_file else ""
        return f"pytest {target} --resume-from {root}{campaign} (with the run's options)"


@dataclass(frozen=True)
class ManifestFacts:
    """What reconcile and the custody proof read of a run's manifest (empty when absent or
    unreadable): its benchmarks (to word its resume) and the ancestors it resumed (their
    engines count too)."""

    benchmarks: tuple[str, ...] = ()
    ancestors: tuple[str, ...] = ()


def manifest_facts(run_root: str | os.PathLike[str]) -> ManifestFacts:
    try:
        data = json.loads((Path(run_root) / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ManifestFacts()
    if not isinstance(data, dict):
        return ManifestFacts()
    names = data.get("benchmarks")
    resume = data.get("resume")
    found = resume.get("ancestors") if isinstance(resume, dict) else None
    return ManifestFacts(
        benchmarks=tuple(str(n) for n in names) if isinstance(names, list) else (),
        ancestors=tuple(str(r) for r in found) if isinstance(found, list) else (),
    )


def reconcile(
    campaign_file: str | os.PathLike[str],
    run_root: str | os.PathLike[str],
    reading_usage: float | None = None,
    *,
    docker_client: Any = None,
) -> RunRecord:
    """Clear the custody entry of the dead run that wrote ``run_root`` (``campaign_file``: a
    campaign file or URL)."""
    campaign = Campaign.open(campaign_file)
    run_id = run_id_of(run_root)
    state = campaign.snapshot()
    entry = state.active_runs.get(run_id)
    if entry is None:
        active = ", ".join(sorted(state.active_runs)) or "none"
        raise _refuse(
            "campaign_run_not_active",
            f"campaign {campaign.location} holds no custody for run {run_id} (active: {active})",
        )
    _refuse_alive(entry)
    facts = manifest_facts(run_root)
    roots = [run_root, *facts.ancestors]
    left = custody_resources_left(entry.custody_run_ids, roots, docker_client)
    way_out = WayOut(run_id=run_id, run_root=str(Path(run_root).absolute()),
                     benchmarks=facts.benchmarks, campaign_file=campaign.cli_arg)
    refusal = leftovers_refusal(run_id, left, way_out=way_out)
    if refusal is not None:
        raise refusal
    return campaign.reconcile_run(run_id, reading_usage)


def _refuse_alive(entry: ActiveRun) -> None:
    """Reconcile never clears a live run: one on this host whose process lives, or one
    anywhere whose lease runs (``campaign_lease_live``: it renews it, so it is alive)."""
    if custody.liveness(entry) != "alive":
        return
    if entry.host != custody.host_name():
        raise _refuse(
            "campaign_lease_live",
            f"{custody.describe(entry)} renews its lease: it is alive on {entry.host}; "
            "reconcile only a run whose lease expired (stop it, or wait)",
        )
    raise _refuse("campaign_run_alive", f"{custody.describe(entry)} is still running")


def reconcile_lost(
    campaign_file: str | os.PathLike[str], run_id: str, reading_usage: float | None = None
) -> RunRecord:
    """Settle a lost runner from the campaign's own records, when its run root is gone (a
    CI machine that vanished before uploading it): its containers cannot be checked from
    here (they went with the machine), and each open hold is charged as unknown spend at
    the hold (or, with the operator's ``reading``, covered by the meter)."""
    campaign = Campaign.open(campaign_file)
    entry = campaign.snapshot().active_runs.get(run_id)
    if entry is None:
        raise _refuse("campaign_run_not_active",
                      f"campaign {campaign.location} holds no custody for run {run_id}")
    _refuse_alive(entry)
    return campaign.reconcile_run(run_id, reading_usage)


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:,.4f}"


def describe_state(state: CampaignState, path: str) -> str:
    lines = [
        f"campaign {path}",
        f"  key          {state.key_fingerprint}",
        f"  ceiling      {_money(state.ceiling_usd)}",
        f"  spent        {_money(state.spent_usd)}  (prior {_money(state.prior_spend_usd)}, "
        f"metered {_money(state.last_usage - state.usage_baseline)}, "
        f"settled {_money(state.settled_usd)})",
        f"  outstanding  {_money(state.outstanding_usd)}",
        f"  available    {_money(state.available_usd)}",
        f"  runs         {len(state.runs)} finished, {len(state.active_runs)} active"
        + (f" (the last {min(5, len(state.runs))} below)" if state.runs else ""),
    ]
    for entry in state.active_runs.values():
        status: str = custody.liveness(entry)
        left = custody.lease_left(entry)
        if left is not None:
            status += f", lease {max(0.0, left):.0f} s"
        if entry.identity:
            status += f", {entry.identity}"
        lines.append(
            f"    {entry.run_id}: pid {entry.pid} on {entry.host} [{status}], "
            f"{len(entry.reservations)} reservation(s) {_money(entry.outstanding_usd)}, "
            f"settled {_money(entry.settled_usd)}, root {entry.run_root}"
            + (f", took over {', '.join(entry.took_over)}" if entry.took_over else "")
        )
    for record in state.runs[-5:]:
        lines.append(
            f"    {record.run_id}: {record.outcome}"
            + (f" (by {record.taken_over_by})" if record.taken_over_by else "")
            + f", settled {_money(record.settled_usd)} over {record.settled_count} instance(s)"
            + (f", {record.unknown_cost_count} of unknown cost" if record.unknown_cost_count
               else "")
        )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness campaign")
    sub = parser.add_subparsers(dest="command", required=True)
    where = "a campaign file, or postgresql://[user@]host/db?campaign=NAME, or env:NAME"
    show = sub.add_parser("show", help="print a campaign's spend, reservations and runs")
    show.add_argument("file", metavar="FILE|URL", help=where)
    show.add_argument("--json", action="store_true", help="print campaign.json as stored")
    rec = sub.add_parser("reconcile", help="clear the custody entry of a crashed run")
    rec.add_argument("file", metavar="FILE|URL", help=where)
    which = rec.add_mutually_exclusive_group(required=True)
    which.add_argument("--run", metavar="RUN_ROOT", help="the crashed run's root")
    which.add_argument("--lost", metavar="RUN_ID",
                       help="a run whose root is gone (its machine vanished): settle it from "
                            "the campaign's records, open holds charged as unknown spend")
    rec.add_argument(
        "--reading",
        type=float,
        metavar="USD",
        help="the key's cumulative usage now, as the provider reports it (data.usage)",
    )
    mig = sub.add_parser("migrate", help="move a campaign file's campaign to PostgreSQL")
    mig.add_argument("file", metavar="FILE")
    mig.add_argument("url", metavar="URL", help="postgresql://[user@]host/db?campaign=NAME "
                     "or env:NAME (the password from PGPASSWORD, ~/.pgpass or a service file)")
    mig.add_argument("--replace", action="store_true",
                     help="overwrite the campaign the URL already holds under that name")
    return parser


def campaign_command(argv: list[str]) -> int:
    """Entry point of ``harness campaign ...``: 0 done, 2 refused (message on stderr)."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        if args.command == "show":
            campaign = Campaign.open(args.file)
            state = campaign.snapshot()
            if args.json:
                print(state.model_dump_json(by_alias=True, indent=2))
            else:
                print(describe_state(state, campaign.location))
            return 0
        if args.command == "migrate":
            return _migrate(args.file, args.url, args.replace)
        if args.lost:
            record = reconcile_lost(args.file, args.lost, args.reading)
        else:
            record = reconcile(args.file, args.run, args.reading)
    except RefusalError as exc:
        print(f"harness campaign {args.command}: refused ({exc.reason}): {exc}", file=sys.stderr)
        return exc.exit_code
    except (E.CampaignPersistenceError, HarnessError) as exc:
        print(f"harness campaign {args.command}: {exc}", file=sys.stderr)
        return 2
    print(
        f"reconciled run {record.run_id}: custody cleared, {record.settled_count} settled "
        f"({_money(record.settled_usd)}), {record.abandoned_count} open reservation(s) "
        + (f"charged as unknown spend at the hold, {_money(record.abandoned_usd)}"
           if args.reading is None else "dropped (reading recorded)")
        + ("; its containers were not checked: the run root is gone, and they went with "
           "its machine" if args.lost else "")
    )
    return 0


def _migrate(file: str, url: str, replace: bool) -> int:
    if not is_campaign_url(url):
        raise _refuse(E.CAMPAIGN_URL_UNUSABLE, f"{url!r} is not a campaign URL: pass "
                      "postgresql://[user@]host/db?campaign=NAME or env:NAME")
    from .migrate import migrate

    moved = migrate(file, url, replace=replace)
    print(f"moved campaign {moved.source} to {moved.target}: ceiling "
          f"{_money(moved.state.ceiling_usd)}, spent {_money(moved.state.spent_usd)}, "
          f"{len(moved.state.active_runs)} run(s) in custody; {moved.source} now names it "
          "(runs given that file are refused)")
    return 0
