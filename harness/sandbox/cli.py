"""``harness sweep``: remove a run's (or every stale run's) containers, networks, volumes.

    harness sweep --run RUN_ID [--worker gw0]
    harness sweep --all-stale [--prefix RUN_ID_PREFIX]
    harness sweep --list          (resources, then each run: alive or stale, and why)
    ... --docker-host URL         (repeatable: each engine of a multi-engine run in turn)

Exit status: 0 done (or nothing to do), 1 something survived or Docker is unreachable,
2 usage error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from harness.sandbox.cleanup import leaked_resources, stale_runs, sweep, sweep_stale
from harness.sandbox.errors import SandboxError


def build_parser(prog: str = "harness sweep") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Remove the containers, networks and volumes of a run, or of every "
        "stale run (one proven dead: its lease expired, or its owner pid is gone on this host), "
        "and list again to prove it.",
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--run", metavar="RUN_ID", help="sweep everything labelled with this run")
    what.add_argument(
        "--all-stale",
        action="store_true",
        help="sweep every run proven dead (expired lease, or owner pid gone on this host; "
        "a run without owner labels: expired TTL); the start-up sweep uses the same rule",
    )
    what.add_argument("--list", action="store_true", help="list what is labelled harness.run, and each run's verdict (alive/stale, why)")
    parser.add_argument("--worker", help="with --run: only this worker's resources (gw0, main)")
    parser.add_argument("--prefix", help="with --all-stale/--list: only runs with this id prefix")
    parser.add_argument("--docker-host", action="append", default=[], metavar="URL",
                        help="sweep this engine (repeatable; default: DOCKER_HOST); a run over "
                        "several engines lists them in its manifest's engines")
    return parser


def sweep_command(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as exc:
        return int(exc.code or 0) and 2
    if args.worker and not args.run:
        parser.print_usage(sys.stderr)
        print("harness sweep: --worker needs --run", file=sys.stderr)
        return 2
    if args.docker_host:
        code = 0
        for url in args.docker_host:
            print(f"engine {url}:")
            code = max(code, _one_engine(args, url))
        return code
    return _one_engine(args, None)


def _one_engine(args: argparse.Namespace, url: str | None) -> int:
    client = None
    try:
        if url is not None:
            from harness.sandbox.engines import client_for

            client = client_for(url)
    except Exception as exc:
        print(f"harness sweep: cannot reach {url}: {exc} [docker_unavailable]", file=sys.stderr)
        return 1
    try:
        if args.list:
            found = leaked_resources(client, run_id_prefix=args.prefix)
            for kind, names in found.items():
                for name in names:
                    print(f"{kind[:-1]}\t{name}")
            for run_id, verdict in stale_runs(client, run_id_prefix=args.prefix).items():
                state = "stale" if verdict.stale else "alive"
                print(f"run\t{run_id}\t{state}: {verdict.reason}")
            return 0
        if args.run:
            removed = sweep(args.run, args.worker, client=client)
            print(f"run {args.run}: removed {len(removed)} resource(s)")
            for name in removed:
                print(f"  {name}")
            return 0
        runs = sweep_stale(client, run_id_prefix=args.prefix)
        print(f"swept {len(runs)} stale run(s)")
        for run_id in runs:
            print(f"  {run_id}")
        return 0
    except SandboxError as exc:
        print(f"harness sweep: {exc} [{exc.reason_code}]", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(sweep_command())
