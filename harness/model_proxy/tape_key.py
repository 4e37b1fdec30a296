"""The key of a model call for record and replay (issue 28): the canonical body and its
SHA-256, and where two bodies first differ.

**The key of a call** (:func:`request_key`) is the SHA-256 of, in UTF-8::

    harness.model_tape.key.v1\\n<METHOD> <route>\\n<canonical body>

``route`` is the path under ``/v1/`` (``chat/completions``, ``messages``, ``models``, ...).
The canonical body is the JSON body *as the gateway forwards it* (after the pin replaced the
model by its declared spelling: :mod:`harness.model_proxy.pinning`) with the top-level keys
of :data:`VOLATILE_KEYS` removed (``stream_options``, ``user``, ``metadata``, ``request_id``,
``idempotency_key``, ``store``, ``safety_identifier``, ``prompt_cache_key``,
``service_tier``: bookkeeping, routing and caching hints that do not change the answer),
serialized with sorted keys, no whitespace (``","`` and ``":"``) and ASCII escapes
(``json.dumps(..., sort_keys=True, separators=(",", ":"), ensure_ascii=True)``); a body-less
call (``GET models``) has ``null``. Everything else counts, at any depth: ``model``,
``messages``, ``tools``, ``tool_choice``, ``stream``, ``temperature``, ``max_tokens``,
``seed``, ``stop``, ``response_format`` and any parameter this list does not name (an unknown
parameter is assumed to change the answer). Headers never count (request ids, retry counts,
SDK versions, credentials), nor the query string.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

KEY_RULE = "harness.model_tape.key.v1"
VOLATILE_KEYS = frozenset(
    {
        "stream_options",
        "user",
        "metadata",
        "request_id",
        "idempotency_key",
        "store",
        "safety_identifier",
        "prompt_cache_key",
        "service_tier",
    }
)
MAX_DIFF = 240  # characters of a first difference


def canonical_body(body: Any) -> Any:
    """The body the key is taken over: top-level :data:`VOLATILE_KEYS` removed."""
    if isinstance(body, dict):
        return {k: v for k, v in body.items() if k not in VOLATILE_KEYS}
    return body


def canonical_text(body: Any) -> str:
    return json.dumps(
        canonical_body(body), sort_keys=True, separators=(",", ":"), ensure_ascii=True
    )


def request_key(method: str, route: str, body: Any) -> str:
    """The call's key: see the module's docstring for the exact rule."""
    text = f"{KEY_RULE}\n{method.upper()} {route}\n{canonical_text(body)}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def first_difference(got: Any, want: Any, path: str = "") -> str | None:
    """Where two canonical bodies first differ, as ``path: what`` (bounded), None if equal."""
    where = path or "(body)"
    if type(got) is not type(want) and not (
        isinstance(got, (int, float))
        and isinstance(want, (int, float))
        and not isinstance(got, bool)
        and not isinstance(want, bool)
    ):
        return _bounded(f"{where}: {type(got).__name__} where the record has {type(want).__name__}")
    if isinstance(got, dict):
        for key in sorted(set(got) | set(want)):
            sub = f"{path}.{key}" if path else str(key)
            if key not in want:
                return _bounded(f"{sub}: not in the record")
            if key not in got:
                return _bounded(f"{sub}: missing (the record has it)")
            found = first_difference(got[key], want[key], sub)
            if found is not None:
                return found
        return None
    if isinstance(got, list):
        for i, (a, b) in enumerate(zip(got, want, strict=False)):
            found = first_difference(a, b, f"{path}[{i}]")
            if found is not None:
                return found
        if len(got) != len(want):
            return _bounded(f"{where}: {len(got)} items, the record has {len(want)}")
        return None
    if isinstance(got, str):
        if got == want:
            return None
        i = next(
            (n for n, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
            min(len(got), len(want)),
        )
        lo = max(0, i - 30)
        return _bounded(
            f"{where}: character {i}: {got[lo : i + 30]!r} where the record has "
            f"{want[lo : i + 30]!r}"
        )
    if got != want:
        return _bounded(f"{where}: {got!r} where the record has {want!r}")
    return None


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_DIFF else text[: MAX_DIFF - 3] + "..."

