"""The reports of an instance carried from an ancestor (settled there; its row was written
at selection, see ``Controller.carry_settled``): no fixture, capture, call or row, only
the two reports pytest expects of a skipped item (setup skipped, teardown passed).

In a single process the carried items are reported together before the loop runs the
others (:func:`report_carried_first`): pytest's per-item protocol and its wrappers
(timeout, warnings, faulthandler, ...) cost more than the reports. Under xdist each worker
reports a carried item where the scheduler placed it (:func:`report_carried`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

import pytest

Location = tuple[str, "int | None", str]
# per session: (parent node id, function name) -> the function's (path, line)
SITES_KEY: pytest.StashKey[dict[tuple[str, str], tuple[str, int | None]]] = pytest.StashKey()


def location_of(item: pytest.Item) -> Location:
    """``item.location``, computed once per test function for its parametrized items (the
    file and line are the function's; only the domain, ``test[param]``, differs): pytest
    computes it per item from the source, a stat and two path conversions."""
    if type(item) is not pytest.Function or type(item).reportinfo is not pytest.Function.reportinfo:
        return item.location
    if "location" in item.__dict__:
        return item.location  # type: ignore[no-any-return]
    sites = item.session.stash.setdefault(SITES_KEY, {})
    key = (item.parent.nodeid if item.parent is not None else "", item.originalname)
    site = sites.get(key)
    if site is None:
        path, lineno, _ = item.location
        sites[key] = (path, lineno)
        return item.location
    location = (site[0], site[1], item.getmodpath())
    item.__dict__["location"] = location  # what the cached property would hold
    return location


def report_carried(item: pytest.Item, carried_from: str, nextitem: pytest.Item | None, *,
                   teardown: bool = True) -> None:
    """The reports of one carried item; ``teardown``: first tear down what the previous
    item left set up and ``nextitem`` does not need (as pytest's protocol does)."""
    ihook = item.ihook
    nodeid, location = item.nodeid, location_of(item)
    ihook.pytest_runtest_logstart(nodeid=nodeid, location=location)
    now = time.time()
    path, lineno, _ = location
    keywords: dict[str, Literal[1]] = dict.fromkeys(item.keywords, 1)
    ihook.pytest_runtest_logreport(report=pytest.TestReport(
        nodeid, location, keywords, "skipped",
        (path, (lineno or 0) + 1, f"Skipped: settled_in_ancestor: settled in run {carried_from}"),
        "setup", duration=0.0, start=now, stop=now, user_properties=list(item.user_properties)))
    outcome: Literal["passed", "failed"] = "passed"
    longrepr: str | None = None
    if teardown:
        try:  # what the previous instance left set up and the next one does not need
            item.session._setupstate.teardown_exact(nextitem)
        except Exception as exc:
            outcome, longrepr = "failed", f"teardown: {type(exc).__name__}: {exc}"
    stop = time.time()
    ihook.pytest_runtest_logreport(report=pytest.TestReport(
        nodeid, location, keywords, outcome, longrepr, "teardown",
        duration=stop - now, start=now, stop=stop, user_properties=list(item.user_properties)))
    ihook.pytest_runtest_logfinish(nodeid=nodeid, location=location)


def report_carried_first(session: pytest.Session,
                         carried_from: Callable[[pytest.Item], str | None]) -> None:
    """Report every carried item of ``session.items`` (``carried_from``: the ancestor run
    that settled an item, None for an item that runs) before anything is set up, and leave
    the others in ``session.items`` for the loop (the caller puts the collected list back
    after it). A stop asked for meanwhile ends the loop as pytest's own loop would."""
    rest: list[pytest.Item] = []
    for item in list(session.items):
        source = carried_from(item)
        if source is None:
            rest.append(item)
            continue
        report_carried(item, source, None, teardown=False)  # nothing is set up yet
        if session.shouldfail:
            raise session.Failed(session.shouldfail)
        if session.shouldstop:
            raise session.Interrupted(session.shouldstop)
    session.items = rest
