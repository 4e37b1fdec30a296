"""Rendering and statistics for harness runs: HTML/Markdown run reports, paired comparison.

Pure modules (:mod:`reports.metrics`, :mod:`reports.stats`, :mod:`reports.compare`) import
neither pytest nor docker. The entry points the runner calls:

- :func:`reports.write.write_report` at session end (and ``harness report``);
- :class:`reports.progress.Progress`, driven by the controller's hooks;
- :func:`reports.cli.report_command` / :func:`reports.cli.compare_command` for ``harness``.
"""

from __future__ import annotations

from reports.errors import ReportInputError
from reports.progress import Progress
from reports.write import ReportPaths, write_report

__all__ = ["Progress", "ReportInputError", "ReportPaths", "write_report"]
