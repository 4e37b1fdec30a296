"""What of an exchange a record may keep: every secret replaced by :data:`REDACTED` in a
body or an event, the parts as text of one encoding, and the stub kept of an exchange that
cannot be stored whole."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from harness.model_proxy.tape_format import TapeRecord, TapeRequest, TapeResponse
from harness.model_proxy.tape_key import canonical_text

REDACTED = "[harness:redacted-secret]"
MIN_SECRET = 8  # shorter strings are not scrubbed (a placeholder, not a key)


def _stub(record: TapeRecord, body: Any, exc: BaseException) -> TapeRecord:
    """What is kept of an exchange that cannot be stored whole: its key, the sha256 of its
    body as forwarded, its status and why."""
    try:
        digest = hashlib.sha256(canonical_text(body).encode("utf-8")).hexdigest()
    except (ValueError, RecursionError, TypeError):
        digest = None
    reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}" if str(exc) else (
        type(exc).__name__)
    return TapeRecord(
        key=record.key,
        request=TapeRequest(method=record.request.method, route=record.request.route,
                            body={"body_sha256": digest}),
        response=TapeResponse(status=record.response.status,
                              content_type=record.response.content_type),
        model=record.model, usage=record.usage, cost_usd=record.cost_usd,
        cost_source=record.cost_source, upstream_error=record.upstream_error,
        redacted=record.redacted, unrecordable=reason)



# --- scrubbing --------------------------------------------------------------------------
def _scrub_text(text: str, secrets: list[str]) -> tuple[str, int]:
    count = 0
    for secret in secrets:
        for form in {secret, json.dumps(secret)[1:-1]}:
            if form in text:
                count += text.count(form)
                text = text.replace(form, REDACTED)
    return text, count


def _scrub_json(value: Any, secrets: list[str]) -> tuple[Any, int]:
    if isinstance(value, str):
        return _scrub_text(value, secrets)
    if isinstance(value, list):
        out, total = [], 0
        for item in value:
            new, n = _scrub_json(item, secrets)
            out.append(new)
            total += n
        return out, total
    if isinstance(value, dict):
        result: dict[str, Any] = {}
        total = 0
        for key, item in value.items():
            new_key, n1 = _scrub_text(str(key), secrets)
            new, n2 = _scrub_json(item, secrets)
            result[new_key] = new
            total += n1 + n2
        return result, total
    return value, 0


def _encode(parts: list[bytes], secrets: list[str]) -> tuple[str, list[str], int]:
    """The parts as text of one encoding (utf-8, else base64), secrets replaced."""
    raw = [s.encode("utf-8") for s in secrets]
    count = 0
    scrubbed: list[bytes] = []
    for part in parts:
        for secret in raw:
            if secret in part:
                count += part.count(secret)
                part = part.replace(secret, REDACTED.encode())
        scrubbed.append(part)
    try:
        return "utf-8", [p.decode("utf-8") for p in scrubbed], count
    except UnicodeDecodeError:
        return "base64", [base64.b64encode(p).decode("ascii") for p in scrubbed], count
