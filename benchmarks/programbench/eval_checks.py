"""What an eval.json must prove before it is scored: one record per test, pytest's own count
of passes against the results file, a build that did not need root. Each refusal is an
:class:`EvalJsonRefused` naming its row's error code and who caused it (the submission or
the infrastructure)."""

from __future__ import annotations

import re
from typing import Literal


class EvalJsonRefused(ValueError):
    """An eval.json not scored: ``code`` is the row's error code, ``cause`` who caused it."""

    code: str = "eval_json_unreadable"
    cause: Literal["agent", "infra"] = "infra"


class EvalJsonTooLarge(EvalJsonRefused):
    """An eval.json past MAX_EVAL_JSON_BYTES: read nowhere, an error of the submission."""

    code, cause = "eval_json_too_large", "agent"


class DuplicateRecords(EvalJsonRefused):
    """An eval.json with two records of one test: an integrity failure, never a pass.

    pytest-rerunfailures 16.6.1 writes a bare ``<testcase/>`` per rerun, which parses as a
    pass (a test failing after 2 reruns scores 2/3); upstream ProgramBench issue 64."""

    code = "junit_duplicate_records"  # the grader's plugins: infrastructure


def check_unique_records(result: object) -> None:
    """Raise :class:`DuplicateRecords` naming the tests recorded more than once."""
    from collections import Counter

    counts = Counter(t.full_name for t in getattr(result, "test_results", []))
    twice = sorted(name for name, n in counts.items() if n > 1)
    if twice:
        raise DuplicateRecords(f"{len(twice)} test(s) recorded more than once in the eval's "
                               f"JUnit results (first: {', '.join(twice[:3])}): the grader's "
                               "test plugins wrote extra records; not scored")


ACCOUNT_PREFIX = "HX-PYTEST-ACCOUNT"


class VerdictMismatch(EvalJsonRefused):
    """The results file says more tests passed than pytest itself counted: it was changed
    after pytest wrote it (or pytest's account never came)."""

    code, cause = "verdict_mismatch", "agent"


class BuildNeedsRoot(EvalJsonRefused):
    """The build, run as the program user, failed on a write it was denied: it needs root,
    which the separated judge does not give a build (the official eval does). Refused with
    this name, never a silent 0."""

    code, cause = "build_needs_root", "agent"


DENIED = re.compile(r"^.*(?:Permission denied|Operation not permitted).*$", re.M)


def check_build_user(result: object) -> None:
    """A build phase that failed (a top-level ``error_code``) with a write the kernel denied
    in ``compile.sh``'s output raises :class:`BuildNeedsRoot`, naming the first denials."""
    if not getattr(result, "error_code", None):
        return
    for entry in getattr(result, "log", []):
        if entry.get("step") == "compile":
            denied = DENIED.findall(entry.get("output") or "")
            if denied:
                shown = "; ".join(line.strip()[:200] for line in denied[:3])
                raise BuildNeedsRoot(
                    f"compile.sh failed on a write it was denied as the build user ({shown}); "
                    "the separated judge builds without root: build inside the workspace or "
                    "the home")


def _passed_in_xml(xml: str) -> int:
    import xml.etree.ElementTree as ET

    root = ET.fromstring(xml)
    results = {"failure", "error", "skipped"}
    return sum(1 for case in root.iter("testcase")
               if not any(child.tag in results for child in case))


def check_pytest_account(result: object, key: str) -> dict[str, str]:
    """Each branch run's results file against pytest's own count of passed tests (the
    results guard prints it last on the test step's stderr, with the eval call's ``key``,
    which the program cannot learn): more passes in the file than pytest counted, or passes
    with no count at all, raise :class:`VerdictMismatch`. Returns the test plugins pytest
    resolved (``{distribution: version}``, from the same lines)."""
    line = re.compile(rf"^{ACCOUNT_PREFIX} {re.escape(key)} passed=(\d+)"
                      rf"(?: plugins=(\S+))?$", re.M)
    account: int | None = None
    plugins: dict[str, str] = {}
    for entry in getattr(result, "log", []):
        step, output = entry.get("step"), entry.get("output") or ""
        if step == "run_tests":
            found = line.findall(output) if key else []
            account = int(found[-1][0]) if found else None
            if found:
                plugins.update(parse_plugins(found[-1][1]))
        elif step == "results_read" and entry.get("branch") and output.strip():
            try:
                passed = _passed_in_xml(output)
            except Exception:  # the CLI judges an unparsable file itself
                continue
            if passed and (account is None or passed > account):
                counted = "no count" if account is None else f"{account} passed"
                raise VerdictMismatch(
                    f"branch {entry['branch']}: the results file has {passed} passing tests, "
                    f"pytest's own account {counted}: the file was changed after pytest "
                    "wrote it; not scored")
    return plugins


def parse_plugins(text: str) -> dict[str, str]:
    """``pytest==8.3.4,pytest-rerunfailures==16.4`` -> ``{name: version}`` (``-``: none)."""
    out: dict[str, str] = {}
    for part in text.split(","):
        name, sep, ver = part.partition("==")
        if sep and name and ver:
            out[name[:64]] = ver[:64]
    return out
