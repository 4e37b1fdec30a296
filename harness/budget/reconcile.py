"""``harness campaign reconcile|show``: clear a crashed run's custody, show a campaign.

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
from pathlib import Path
from typing import Any

from harness.errors import HarnessError, RefusalError

from . import custody
from . import errors as E
from .campaign import Campaign
from .models import CampaignState, RunRecord

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
    ``harness.run=<run_id>``, from a fresh query; RefusalError when Docker cannot tell."""
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
    return {
        "containers": sorted(str(getattr(c, "name", c)) for c in containers),
        "networks": sorted(str(getattr(n, "name", n)) for n in networks),
    }


def leftovers_refusal(run_id: str, left: dict[str, list[str]]) -> RefusalError | None:
    """The refusal naming what a run left (None when nothing is left)."""
    if not left["containers"] and not left["networks"]:
        return None
    reason = "containers_left" if left["containers"] else "networks_left"
    named = [f"container {n}" for n in left["containers"]]
    named += [f"network {n}" for n in left["networks"]]
    return _refuse(
        reason,
        f"run {run_id} still has {len(named)} resource(s) labelled harness.run={run_id}: "
        f"{', '.join(named)}; remove them (harness sweep --run {run_id}) and reconcile again",
    )


def reconcile(
    campaign_file: str | os.PathLike[str],
    run_root: str | os.PathLike[str],
    reading_usage: float | None = None,
    *,
    docker_client: Any = None,
) -> RunRecord:
    """Clear the custody entry of the dead run that wrote ``run_root``."""
    campaign = Campaign.open(campaign_file)
    run_id = run_id_of(run_root)
    state = campaign.snapshot()
    entry = state.active_runs.get(run_id)
    if entry is None:
        active = ", ".join(sorted(state.active_runs)) or "none"
        raise _refuse(
            "campaign_run_not_active",
            f"campaign {campaign.path} holds no custody for run {run_id} (active: {active})",
        )
    if custody.liveness(entry) == "alive":
        raise _refuse("campaign_run_alive", f"{custody.describe(entry)} is still running")
    left = resources_left(run_id, docker_client)
    if docker_client is None:  # and on every other engine the run placed instances on
        from harness.sandbox.engines import LOCAL, client_for, read_engines

        for engine in read_engines(os.fspath(run_root)):
            if engine.url != LOCAL:
                more = resources_left(run_id, client_for(engine.url))
                for kind in ("containers", "networks"):
                    left[kind] += [f"{n} (on {engine.url})" for n in more[kind]]
    refusal = leftovers_refusal(run_id, left)
    if refusal is not None:
        raise refusal
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
        f"  runs         {len(state.runs)} finished, {len(state.active_runs)} active",
    ]
    for entry in state.active_runs.values():
        status = custody.liveness(entry)
        lines.append(
            f"    {entry.run_id}: pid {entry.pid} on {entry.host} [{status}], "
            f"{len(entry.reservations)} reservation(s) {_money(entry.outstanding_usd)}, "
            f"settled {_money(entry.settled_usd)}, root {entry.run_root}"
        )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness campaign")
    sub = parser.add_subparsers(dest="command", required=True)
    show = sub.add_parser("show", help="print a campaign's spend, reservations and runs")
    show.add_argument("file")
    show.add_argument("--json", action="store_true", help="print campaign.json as stored")
    rec = sub.add_parser("reconcile", help="clear the custody entry of a crashed run")
    rec.add_argument("file")
    rec.add_argument("--run", required=True, metavar="RUN_ROOT", help="the crashed run's root")
    rec.add_argument(
        "--reading",
        type=float,
        metavar="USD",
        help="the key's cumulative usage now, as the provider reports it (data.usage)",
    )
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
                print(describe_state(state, str(campaign.path)))
            return 0
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
        f"{'charged' if args.reading is None else 'dropped (reading recorded)'}"
    )
    return 0
