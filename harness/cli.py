"""The ``harness`` command: tools around runs (the runs themselves are ``pytest`` sessions).

Each subcommand lives in its own module and exposes ``<name>_command(argv) -> int``; this
file only dispatches. Bad input: one line on stderr naming the input and the fix, exit 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.core.commands import dispatch

# name -> (module, function, help)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "merge": ("harness.cli", "merge_command", "combine the run roots of a sharded run"),
    "shard-plan": ("harness.run.shard_plan", "shard_plan_command",
                   "how many shards a selection needs so that none outlives its CI job"),
    "sweep": ("harness.sandbox.cli", "sweep_command", "remove a run's containers and networks"),
    "campaign": ("harness.budget.reconcile", "campaign_command",
                 "campaign budget tools (a file or a PostgreSQL URL): show, reconcile, migrate"),
    "agent-server": ("harness.agents.reference_server.server", "agent_server_command",
                     "start the reference agent server"),
    "images": ("harness.sandbox.images.inventory", "images_command",
               "list or prune the images this harness built or pulled"),
    "schema": ("harness.cli", "schema_command", "export the JSON Schemas of the runner's files"),
    "exec": ("harness.agents.host_exec", "exec_command",
             "run a command in this instance's sandbox (for host-command agents)"),
    "replay-check": ("harness.model_proxy.replay_check", "replay_check_command",
                     "re-run a run's instances under strict replay of its model records"),
}


def merge_command(argv: Sequence[str]) -> int:
    from harness.run.merge import MergeError, merge

    parser = argparse.ArgumentParser(prog="harness merge",
                                     description=COMMANDS["merge"][2])
    parser.add_argument("roots", nargs="+", type=Path, help="shard run roots")
    parser.add_argument("--output", required=True, type=Path, help="new directory")
    parser.add_argument("--accept-partial", action="store_true",
                        help="merge even when units have no final row (not reportable)")
    args = parser.parse_args(list(argv))
    try:
        record = merge(args.roots, args.output, accept_partial=args.accept_partial)
    except MergeError as exc:
        print(f"harness merge: {exc}", file=sys.stderr)
        return 2
    counts = ", ".join(f"{k} {v}" for k, v in record.counts.items())
    mean = "n/a" if record.mean_score is None else f"{record.mean_score:.4f}"
    print(f"merged {len(record.shards)} shards of {record.shard_count}: "
          f"{record.selected} units ({counts}); mean score {mean}; wrote {args.output}")
    if record.missing:
        print(f"incomplete: {record.selected - len(record.missing)} of {record.selected} units "
              "have a final row: not reportable")
    return 0


def schema_command(argv: Sequence[str]) -> int:
    import json

    from harness.core import models

    parser = argparse.ArgumentParser(prog="harness schema", description=COMMANDS["schema"][2])
    parser.add_argument("output", type=Path, help="directory for the *.schema.json files")
    args = parser.parse_args(list(argv))
    args.output.mkdir(parents=True, exist_ok=True)
    for name in ("TaskRow", "RowDetails", "Manifest", "Plan"):  # RowDetails: the row's details
        model = getattr(models, name)
        schema = model.model_json_schema(by_alias=True)
        (args.output / f"{name}.schema.json").write_text(json.dumps(schema, indent=2) + "\n")
    print(f"wrote schemas to {args.output}")
    return 0


def all_commands() -> dict[str, tuple[str, str, str]]:
    """The core's commands, then those the report and the registered benchmarks add."""
    from harness.core.registry import plugin_commands

    return {**COMMANDS, **plugin_commands()}


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch("harness", all_commands(), sys.argv[1:] if argv is None else argv,
                    "Runs are pytest sessions: pytest benchmarks/<name> "
                    "[--dry-run|--resume-from RUN]")


if __name__ == "__main__":
    raise SystemExit(main())
