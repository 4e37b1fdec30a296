"""The report as a plugin of the core (entry point ``harness.report``): the controller calls
these two functions through :func:`harness.core.registry.report_plugin`, never importing reports."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class _Report:
    # ``harness <name> ...`` commands the report contributes: (module, function, help).
    commands: dict[str, tuple[str, str, str]] = {
        "report": ("reports.cli", "report_command", "write the HTML and Markdown report of a run"),
        "compare": ("reports.cli", "compare_command", "paired comparison of two runs"),
    }

    def progress(self, total: int, stream: Any, *, is_tty: bool) -> Any:
        from reports.progress import Progress

        return Progress(total, stream, is_tty=is_tty)

    def preload(self) -> None:
        """Import and compile what :meth:`write_report` uses (a process that forks many runs,
        such as the tests' fork server, calls this once)."""
        from reports.html import TEMPLATE, environment

        environment().get_template(TEMPLATE)

    def write_report(self, run_root: Path, *, compare_to: Path | None) -> Path | None:
        from reports.write import write_report

        return write_report(run_root, compare_to=compare_to).html


REPORT = _Report()
