"""One model call sent upstream under the run's pacing (:mod:`harness.model_proxy.pacing`):
its turn under the requests-per-minute limit, then the call; a 429 waited out and sent
again, a 5xx or a failed connection retried within the per-call and per-run budgets, every
wait counted against the call's ceiling. The gateway relays what this returns."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from harness.model_proxy.pacing import Pacer
from harness.model_proxy.usage import InstanceMeter

RATE_LIMITED = 429
# Failures retried: the connection was never made, so the provider never saw the request.
# Anything later (a body cut, a read timeout) may have been generated and billed upstream,
# and a request httpx refuses to send (the agent's malformed headers) would fail again:
# neither is sent again.
NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout)


class CallTrouble:
    """One call's share of the provider's pushback, counted as it goes to the instance's
    meter (the tape keeps it beside the call: its 429s, retries, waits and stalls)."""

    def __init__(self, meter: InstanceMeter) -> None:
        self.meter = meter
        self.counts: dict[str, float] = {}

    def trouble(self, *, rate_limited: int = 0, retries: int = 0, waited_s: float = 0.0,
                stalls: int = 0) -> None:
        self.meter.trouble(rate_limited=rate_limited, retries=retries, waited_s=waited_s,
                           stalls=stalls)
        for key, value in (("rate_limited", rate_limited), ("retries", retries),
                           ("waited_s", waited_s), ("stalls", stalls)):
            if value:
                self.counts[key] = round(self.counts.get(key, 0) + value, 3)


def send_paced(client: httpx.Client, pacer: Pacer, meter: InstanceMeter | CallTrouble,
               build: Callable[[], httpx.Request], *, stream: bool,
               deadline: float) -> httpx.Response:
    """The response to relay: a success, or the provider's last refusal once waiting longer
    would pass ``deadline`` (monotonic) or the retries are spent. A connection that fails
    past them raises its :class:`httpx.HTTPError`; no turn before ``deadline`` raises
    :class:`~harness.model_proxy.pacing.PacingTimeout`. A stream is returned open."""
    attempt, retries = 0, 0
    while True:
        meter.trouble(waited_s=pacer.turn(deadline))
        try:
            resp = client.send(build(), stream=stream)
        except NEVER_SENT:  # the request never reached the provider: nothing was spent
            delay = _retry_delay(pacer, attempt, retries, None, deadline, limited=False)
            if delay is None:
                raise
            retries += 1
        else:
            status = resp.status_code
            if status != RATE_LIMITED and status < 500:
                return resp
            limited = status == RATE_LIMITED
            meter.trouble(rate_limited=int(limited))
            delay = _retry_delay(pacer, attempt, retries, resp.headers.get("retry-after"),
                                 deadline, limited=limited)
            if delay is None:
                return resp
            resp.close()
            retries += 0 if limited else 1
        time.sleep(delay)
        meter.trouble(retries=1, waited_s=delay)
        attempt += 1


def _retry_delay(pacer: Pacer, attempt: int, retries: int, retry_after: str | None,
                 deadline: float, *, limited: bool) -> float | None:
    """Seconds to wait before sending again, None when the call must stop here: a 429 is
    waited out while the ceiling allows; a failure is retried while the call's retries and
    the run's budget allow (and the ceiling)."""
    delay = pacer.backoff(attempt, retry_after)
    if time.monotonic() + delay > deadline:
        return None
    if not limited and (retries >= pacer.policy.retries or not pacer.take_retry()):
        return None
    return delay
