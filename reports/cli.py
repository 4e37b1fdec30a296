"""``harness report`` and ``harness compare``: argv in, exit status out.

Bad input (not a run root, a corrupt ledger, output that would be overwritten) prints one
line naming the input and the fix, returns 2 and writes nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.core.fsutil import atomic_write_text
from reports.build import compare_runs
from reports.errors import ReportInputError
from reports.figures import ReportFigures
from reports.run import load_run
from reports.stats import DEFAULT_RESAMPLES
from reports.terminal import models_renderable, print_compare, samples_renderable
from reports.write import write_report

EXIT_OK = 0
EXIT_BAD_INPUT = 2


def _stats_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument(
        "--resamples",
        type=int,
        default=DEFAULT_RESAMPLES,
        help=f"bootstrap resamples (default {DEFAULT_RESAMPLES})",
    )
    parser.add_argument("--force", action="store_true", help="replace existing output")


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace | int:
    try:
        args = parser.parse_args(None if argv is None else list(argv))
    except SystemExit as exc:  # argparse already printed usage and the error
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    if args.resamples < 1:
        print(f"{parser.prog}: --resamples {args.resamples}: give at least 1", file=sys.stderr)
        return EXIT_BAD_INPUT
    return args


def report_command(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="harness report",
        description="Write report.html, report.md and report.json for a run root.",
    )
    parser.add_argument("run", type=Path, nargs="?", help="run root (holds run_manifest.json)")
    parser.add_argument("--output", "-o", type=Path, help="output folder (default RUN/report)")
    parser.add_argument("--compare-to", type=Path, metavar="RUN", help="baseline run to compare")
    parser.add_argument("--index", type=Path, metavar="DIR",
                        help="instead of one run: index.html over every run root under DIR "
                             "(written to DIR, or --output)")
    _stats_options(parser)
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    if (args.run is None) == (args.index is None):
        print("harness report: give a run root, or --index DIR (not both)", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.index is not None:
        return index_command(args.index, args.output)
    try:
        paths = write_report(
            args.run,
            args.output,
            args.compare_to,
            overwrite=args.force,
            resamples=args.resamples,
            seed=args.seed,
        )
    except ReportInputError as exc:
        print(f"harness report: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"harness report: wrote {paths.html}, {paths.markdown.name} and {paths.figures.name}")
    print_attempts(paths.figures)
    return EXIT_OK


def index_command(top: Path, output: Path | None) -> int:
    from reports.viewer.index import write_index

    try:
        path = write_index(top, output)
    except ReportInputError as exc:
        print(f"harness report: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"harness report: wrote {path}")
    return EXIT_OK


def print_attempts(figures_path: Path) -> None:
    """A run with repeated attempts or flagged model calls: those sections on the terminal
    too (nothing more for a K=1 run whose rows name only allowed models)."""
    try:
        figures = ReportFigures.model_validate_json(figures_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    from rich.console import Console

    console = Console()
    if figures.samples is not None:
        console.print(samples_renderable(figures.samples))
    if figures.models is not None and figures.models.flagged:
        console.print(models_renderable(figures.models))


def compare_command(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="harness compare",
        description="Paired comparison of two runs on their shared instances (B minus A).",
    )
    parser.add_argument("run_a", type=Path, metavar="RUN_A", help="baseline run root")
    parser.add_argument("run_b", type=Path, metavar="RUN_B", help="candidate run root")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the figures as JSON")
    _stats_options(parser)
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    try:
        if args.json is not None and args.json.exists() and not args.force:
            raise ReportInputError(
                f"{args.json} already exists; pass another --json FILE, or --force to replace it"
            )
        if args.json is not None and args.json.is_dir():
            raise ReportInputError(f"--json {args.json} is a directory; give a file path")
        run_a, run_b = load_run(args.run_a), load_run(args.run_b)
    except ReportInputError as exc:
        print(f"harness compare: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    result = compare_runs(run_a, run_b, resamples=args.resamples, seed=args.seed)
    print_compare(result)
    if args.json is not None:
        atomic_write_text(args.json, result.model_dump_json(by_alias=True, indent=2) + "\n")
        print(f"harness compare: wrote {args.json}")
    return EXIT_OK
