"""The run's live view: the report plugin's progress lines, and the workers' activity (image
pulls) polled once a second. The controller starts it once the selection is known."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import pytest


class TerminalLines:
    """A text stream that writes whole lines through pytest's terminal reporter, so progress
    lines never land in the middle of pytest's own output."""

    def __init__(self, reporter: Any) -> None:
        self.reporter = reporter

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.strip():
                self.reporter.write_line(line)
        return len(text)

    def flush(self) -> None:
        return None

    def isatty(self) -> bool:
        return False


class LiveView:
    """The progress view (None when off, or no report plugin) and its activity poll."""

    def __init__(self, config: pytest.Config, mode: str, run_root: Path, total: int,
                 interval_s: float = 1.0) -> None:
        self.progress: Any = None
        self._stop = threading.Event()
        if mode == "off" or total == 0:
            return
        from harness.core.registry import report_plugin

        report = report_plugin()
        if report is None:
            return
        is_tty = sys.stdout.isatty() if mode == "auto" else mode == "live"
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        stream: Any = sys.stdout if is_tty or reporter is None else TerminalLines(reporter)
        self.progress = report.progress(total, stream, is_tty=is_tty)
        self._poll(run_root, interval_s)

    def _poll(self, root: Path, interval_s: float) -> None:
        from harness.core.activity import read_all

        progress, stop = self.progress, self._stop

        def loop() -> None:
            while not stop.wait(interval_s):
                progress.set_activity(read_all(root))

        threading.Thread(target=loop, name="harness-activity", daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        if self.progress is not None:
            self.progress.close()
