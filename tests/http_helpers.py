"""One plain HTTP GET for the tests that read our own endpoints (/metrics, /healthz, /readyz)."""

from __future__ import annotations

import urllib.error
import urllib.request


def http_get(url: str, timeout: float = 10.0) -> tuple[int, str]:
    """``(status, body)``; an error status is an answer, not an exception (a probe's 503
    is what a health test asserts)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
