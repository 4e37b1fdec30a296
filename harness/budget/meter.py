"""Usage meters: where the controller gets the key's cumulative usage (USD).

``--meter`` spec (see :func:`make_meter`):

* ``openrouter`` — ``GET <base>/key`` -> ``data.usage`` (``limit_remaining`` too), with
  ``Cache-Control: no-cache``; base ``https://openrouter.ai/api/v1`` or
  ``openrouter=<base url>``. The key (env ``OPENROUTER_API_KEY``) goes on stdin to a
  throwaway ``python -I -S`` process whose argv and environment hold no secret.
* ``none`` — no meter: spend is the sum of settled instance costs only.
* ``SCHEME:ARG`` — a meter that a loaded module registered with :func:`register_meter`.
  The test double ``fake-file:PATH`` (:mod:`harness.testing.fake_meter`) is one: it exists
  only in a process that loaded it (``-p harness.testing.fake_meter``, or a test suite's
  ``harness.testing.plugin``), never from a real run's options alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from .errors import MeterError

if TYPE_CHECKING:  # the budget models load when a meter reads, not at collection
    from .models import MeterReading

METER_KEY_ENV = "OPENROUTER_API_KEY"
OPENROUTER_BASE_URL = "https://openrouter.ai/api/v1"
_PROBE = Path(__file__).with_name("_key_probe.py")
_PASSED_ENV = (
    "PATH",
    "LANG",
    "LC_ALL",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "NO_PROXY",
    "no_proxy",
)


def key_fingerprint(secret: str) -> str:
    """``sha256:`` + the first 16 hex digits: safe to write where the key is not."""
    return "sha256:" + hashlib.sha256(secret.encode("utf-8")).hexdigest()[:16]


class Meter(Protocol):
    name: str
    fingerprint: str  # identifies the billed key in campaign.json (never the key)

    def read(self, timeout_sec: float) -> MeterReading:
        """One reading within ``timeout_sec``; raises MeterError."""
        ...


MeterFactory = TypeVar("MeterFactory", bound=Callable[[str], Meter])


class OpenRouterKeyMeter:
    """Provider key endpoint, read by a throwaway isolated interpreter per reading."""

    name = "openrouter"

    def __init__(self, api_key: str, base_url: str = OPENROUTER_BASE_URL) -> None:
        if not api_key:
            raise ValueError("the meter needs a provider key")
        self._key = api_key
        self.url = base_url.rstrip("/") + "/key"
        self.fingerprint = key_fingerprint(api_key)

    def __repr__(self) -> str:
        return f"OpenRouterKeyMeter(url={self.url!r}, key={self.fingerprint})"

    def _scrub(self, text: str) -> str:
        return text.replace(self._key, "[key]")

    def read(self, timeout_sec: float) -> MeterReading:
        requested = time.time()
        env = {name: os.environ[name] for name in _PASSED_ENV if name in os.environ}
        payload = json.dumps({"key": self._key, "url": self.url, "timeout": timeout_sec})
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(_PROBE)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                close_fds=True,
            )
        except OSError as exc:
            raise MeterError("unavailable", f"could not start the meter probe: {exc}") from exc
        try:
            out, err = proc.communicate(payload.encode("utf-8"), timeout=timeout_sec)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise MeterError(
                "timeout", f"no reading from {self.url} within {timeout_sec:g}s"
            ) from None
        line = out.decode("utf-8", "replace").strip().splitlines()
        try:
            result = json.loads(line[-1]) if line else {}
        except ValueError:
            result = {}
        if not isinstance(result, dict) or ("usage" not in result and "error" not in result):
            tail = self._scrub(err.decode("utf-8", "replace").strip()[-300:])
            raise MeterError("probe", f"meter probe exited {proc.returncode}: {tail}")
        if "error" in result:
            raise MeterError(str(result.get("error_type")), self._scrub(str(result["error"])))
        from .models import MeterReading

        return MeterReading(
            usage=float(result["usage"]),
            requested_at_unix=requested,
            observed_at_unix=time.time(),
            limit_remaining=result.get("limit_remaining"),
            source=self.name,
        )


# Meters named by ``--meter SCHEME:ARG``, registered by the modules that define them.
_FACTORIES: dict[str, Callable[[str], Meter]] = {}


def register_meter(scheme: str) -> Callable[[MeterFactory], MeterFactory]:
    """Decorator: ``factory(arg) -> Meter`` builds the meter of ``--meter <scheme>:<arg>``."""

    def register(factory: MeterFactory) -> MeterFactory:
        _FACTORIES[scheme] = factory
        return factory

    return register


def make_meter(
    spec: str, *, environ: Mapping[str, str] | None = None, key_env: str = METER_KEY_ENV
) -> Meter | None:
    """Build the meter named by ``--meter``; None for ``none``. ValueError if unusable."""
    env = os.environ if environ is None else environ
    if spec == "none":
        return None
    if spec == "openrouter" or spec.startswith("openrouter="):
        base = spec.partition("=")[2] or OPENROUTER_BASE_URL
        key = env.get(key_env, "")
        if not key:
            raise ValueError(f"--meter openrouter needs the provider key in ${key_env}")
        return OpenRouterKeyMeter(key, base)
    scheme, sep, arg = spec.partition(":")
    if sep and scheme in _FACTORIES:
        return _FACTORIES[scheme](arg)
    known = "".join(f", {name}:ARG" for name in sorted(_FACTORIES))
    raise ValueError(f"unknown --meter {spec!r}: use openrouter[=URL]{known} or none")
