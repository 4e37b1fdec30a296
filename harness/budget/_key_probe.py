"""Throwaway process that reads a provider key's usage: ``python -I -S _key_probe.py``.

Standard library only (it runs isolated, without site-packages). The request comes on
stdin as JSON ``{"key", "url", "timeout"}`` so the key never appears in argv or the
environment; one JSON line goes to stdout: ``{"usage", "limit_remaining"}`` or
``{"error_type", "error"}``. Error texts never contain the key.
"""

import json
import sys
import urllib.error
import urllib.parse
import urllib.request


def main() -> int:
    request = json.loads(sys.stdin.read())
    key = request["key"]
    url = request["url"]
    handlers = []
    host = urllib.parse.urlsplit(url).hostname or ""
    if host in ("127.0.0.1", "localhost", "::1"):
        handlers.append(urllib.request.ProxyHandler({}))
    opener = urllib.request.build_opener(*handlers)
    http_request = urllib.request.Request(
        url,
        headers={
            "Authorization": "Bearer " + key,
            "Cache-Control": "no-cache",
            "Accept": "application/json",
        },
    )
    try:
        with opener.open(http_request, timeout=float(request["timeout"])) as response:
            body = json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        return _fail("http", f"HTTP {exc.code} from {url}")
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return _fail("unavailable", f"{type(reason).__name__} reaching {url}")
    except ValueError:
        return _fail("parse", "response is not JSON")
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, dict) or "usage" not in data:
        return _fail("parse", "response has no data.usage")
    try:
        usage = float(data["usage"])
    except (TypeError, ValueError):
        return _fail("parse", "data.usage is not a number")
    remaining = data.get("limit_remaining")
    try:
        remaining = None if remaining is None else float(remaining)
    except (TypeError, ValueError):
        remaining = None
    sys.stdout.write(json.dumps({"usage": usage, "limit_remaining": remaining}) + "\n")
    return 0


def _fail(kind: str, message: str) -> int:
    sys.stdout.write(json.dumps({"error_type": kind, "error": message}) + "\n")
    return 1


if __name__ == "__main__":
    sys.exit(main())
