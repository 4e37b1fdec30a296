"""The provider-key meter against a real HTTP server on 127.0.0.1.

The key must reach the server (Authorization header) and nowhere else: not the argv or
the environment of the process that reads it, not any file the run writes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.budget import (
    Campaign,
    MeterError,
    MeterSupervisor,
    OpenRouterKeyMeter,
    key_fingerprint,
    make_meter,
    read_monitor,
)
from tests.budget.budget_support import KeyEndpoint, children_running

SECRET = "sk-or-v1-" + "5eC7e7" * 8


def _meter(endpoint: KeyEndpoint) -> OpenRouterKeyMeter:
    meter = make_meter(f"openrouter={endpoint.base_url}", environ={"OPENROUTER_API_KEY": SECRET})
    assert isinstance(meter, OpenRouterKeyMeter)
    return meter


def test_reads_usage_and_never_exposes_the_key(key_endpoint: KeyEndpoint, tmp_path: Path) -> None:
    seen: list[tuple[bytes, bytes]] = []

    def inspect_probe() -> None:  # runs while the probe process waits for the answer
        for pid in children_running("_key_probe.py"):
            seen.append(
                (
                    Path(f"/proc/{pid}/cmdline").read_bytes(),
                    Path(f"/proc/{pid}/environ").read_bytes(),
                )
            )

    key_endpoint.on_request = inspect_probe
    meter = _meter(key_endpoint)
    assert SECRET not in repr(meter) and meter.fingerprint == key_fingerprint(SECRET)

    reading = meter.read(timeout_sec=5)
    assert reading.usage == 1.23 and reading.limit_remaining == 8.77
    assert reading.requested_at_unix <= reading.observed_at_unix

    headers = key_endpoint.requests[-1]
    assert headers["authorization"] == f"Bearer {SECRET}"
    assert headers["cache-control"] == "no-cache"
    assert seen, "the probe process was not seen while it ran"
    for cmdline, environ in seen:
        argv = cmdline.split(b"\0")
        assert b"-I" in argv and b"-S" in argv
        assert SECRET.encode() not in cmdline
        assert SECRET.encode() not in environ

    # A whole supervised run with this meter writes no secret anywhere.
    run_root = tmp_path / "run"
    campaign = Campaign.open_or_create(
        tmp_path / "campaign.json",
        ceiling_usd=50.0,
        key_fingerprint=meter.fingerprint,
        baseline_usage=reading.usage,
    )
    campaign.admit_run("r1", run_root, os.getpid())
    supervisor = MeterSupervisor(
        campaign, "r1", run_root, meter, poll_sec=0.05, read_timeout_sec=5, blindness_sec=10
    )
    key_endpoint.usage = 2.5
    assert supervisor.poll() is None
    supervisor.finish("completed", 0)
    assert read_monitor(run_root).meter.last_usage == 2.5
    assert campaign.snapshot().spent_usd == pytest.approx(1.27)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {"campaign.json", "monitor.json"}
    for path in written:
        assert SECRET.encode() not in path.read_bytes(), path
    assert meter.fingerprint.encode() in (tmp_path / "campaign.json").read_bytes()


def test_http_errors_are_meter_errors_without_the_key(key_endpoint: KeyEndpoint) -> None:
    key_endpoint.status = 401
    with pytest.raises(MeterError) as failed:
        _meter(key_endpoint).read(timeout_sec=5)
    assert failed.value.kind == "http" and "401" in str(failed.value)
    assert SECRET not in str(failed.value)


def test_an_unreachable_endpoint_is_a_meter_error() -> None:
    meter = OpenRouterKeyMeter(SECRET, "http://127.0.0.1:9/api/v1")
    with pytest.raises(MeterError) as failed:
        meter.read(timeout_sec=5)
    assert failed.value.kind == "unavailable" and SECRET not in str(failed.value)


def test_meter_specs() -> None:
    assert make_meter("none") is None
    with pytest.raises(ValueError, match="OPENROUTER_API_KEY"):
        make_meter("openrouter", environ={})
    with pytest.raises(ValueError, match="unknown --meter"):
        make_meter("billing-api")
    meter = make_meter("openrouter", environ={"OPENROUTER_API_KEY": SECRET})
    assert isinstance(meter, OpenRouterKeyMeter)
    assert meter.url == "https://openrouter.ai/api/v1/key"


def test_the_fake_file_meter_exists_only_where_a_test_loads_it(tmp_path: Path) -> None:
    """A real run's options never reach the test double: in a fresh interpreter
    ``fake-file:PATH`` is an unknown meter; once ``harness.testing.fake_meter`` is loaded
    (``-p harness.testing.fake_meter``) it reads the file."""
    import subprocess
    import sys

    usage = tmp_path / "usage.json"
    usage.write_text('{"usage": 2.5, "limit_remaining": 7}')
    spec = "fake-file:" + str(usage)
    code = ("import sys\nfrom harness.budget import make_meter\n"
            "try:\n"
            f"    make_meter({spec!r})\n"
            "except ValueError as exc:\n"
            "    print('refused:', exc)\n"
            "assert 'harness.testing.fake_meter' not in sys.modules\n"
            "import harness.testing.fake_meter\n"
            f"m = make_meter({spec!r})\nr = m.read(1)\n"
            "print(type(m).__module__, m.name, r.usage, r.limit_remaining, r.source)")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=60, check=True).stdout.splitlines()
    assert out == [f"refused: unknown --meter {spec!r}: use openrouter[=URL] or none",
                   "harness.testing.fake_meter fake-file 2.5 7.0 fake-file"]
    import harness.testing.fake_meter  # noqa: F401  (registers the scheme here too)

    with pytest.raises(ValueError, match=r"unknown --meter 'fake-files:x': use "
                                         r"openrouter\[=URL\], fake-file:ARG or none"):
        make_meter("fake-files:x")
