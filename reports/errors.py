"""The one error the report commands turn into ``exit 2`` with a single line."""

from __future__ import annotations


class ReportInputError(Exception):
    """Bad input to a report or comparison: the message names the input and the fix."""

    exit_code = 2
