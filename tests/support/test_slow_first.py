"""The order the project's tests run in under ``pytest -n N`` (``tests/conftest.py``): the
known-slow units first, balanced over the workers' first batches; a unit is the tests that
share a module-scoped fixture of their module or an expensive session fixture."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tests.conftest import _slow_first, _units


def item(nodeid: str, *fixtures: tuple[str, str, str]) -> Any:
    """A collected test: its id and its fixtures as (name, scope, where defined)."""
    defs = {name: [SimpleNamespace(scope=scope, baseid=base)] for name, scope, base in fixtures}
    return SimpleNamespace(nodeid=nodeid, fixturenames=[n for n, _, _ in fixtures],
                           _fixtureinfo=SimpleNamespace(name2fixturedefs=defs))  # fmt: skip


def ids(items: list[Any]) -> list[str]:
    return [i.nodeid for i in items]


def test_a_modules_own_fixture_and_a_shared_browser_tie_tests_into_one_unit() -> None:
    own = ("big_report", "module", "tests/r/test_large.py")
    browser = ("browser", "session", "tests/r")
    items = [
        item("tests/r/test_large.py::a", own),
        item("tests/r/test_large.py::b", own, browser),
        item("tests/r/test_browser.py::c", browser),
        item("tests/r/test_browser.py::d"),  # no shared fixture: on its own
        item("tests/x/test_x.py::e", ("tmp_path", "function", "")),
        item("tests/x/test_x.py::f", ("pb_fixture", "session", "tests/x")),  # not its module's
    ]
    units = sorted(sorted(ids(u)) for u in _units(items).values())
    assert units == [
        ["tests/r/test_browser.py::c", "tests/r/test_large.py::a", "tests/r/test_large.py::b"],
        ["tests/r/test_browser.py::d"], ["tests/x/test_x.py::e"], ["tests/x/test_x.py::f"],
    ]  # fmt: skip


def test_slow_units_lead_the_first_batches_longest_first_to_the_least_loaded_worker() -> None:
    own = ("images", "module", "tests/d/test_d.py")
    items = [item(f"tests/f/test_f.py::t{n}") for n in range(40)]
    items += [item("tests/d/test_d.py::one", own), item("tests/d/test_d.py::two", own)]
    items += [item("tests/s/test_s.py::slow"), item("tests/s/test_s.py::slower")]
    known: dict[str, float] = {"tests/d/test_d.py::one": 30, "tests/d/test_d.py::two": 30,
             "tests/s/test_s.py::slow": 20, "tests/s/test_s.py::slower": 40}  # fmt: skip
    ordered = _slow_first(items, known, workers=2, maxchunk=None)
    assert sorted(ids(ordered)) == sorted(ids(items))  # the same tests, each once
    chunk = len(items) // 2 // 4  # xdist's first batch per worker
    first, second = ids(ordered[:chunk]), ids(ordered[chunk:2 * chunk])
    # the module (60 s, both tests together) to one worker, then 40 s to the other, then
    # 20 s to the less loaded one (the second: 40 < 60)
    assert first[:2] == ["tests/d/test_d.py::one", "tests/d/test_d.py::two"]
    assert second[:2] == ["tests/s/test_s.py::slower", "tests/s/test_s.py::slow"]
    assert not any("test_s" in i or "test_d" in i for i in ids(ordered[2 * chunk:]))


def test_one_worker_or_nothing_known_keeps_the_collection_order() -> None:
    items = [item(f"tests/f/test_f.py::t{n}") for n in range(10)]
    assert _slow_first(items, {"tests/f/test_f.py::t3": 5}, workers=1, maxchunk=None) == items
    assert _slow_first(items, {}, workers=3, maxchunk=None) == items
