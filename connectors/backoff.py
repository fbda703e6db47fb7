"""Retry delays for every connector: exponential backoff with full jitter, Retry-After.

A small pure function, not a library: a loop needs "how long after the n-th failure" and
"what the server asked for", and tests pin both down (the random source is a parameter).

Traps: full jitter (a uniform draw up to ``min(cap, base * 2**n)``), so the replicas a
restarted API server drops do not come back in waves; ``Retry-After`` (seconds or an HTTP
date) wins but is capped, so a proxy's ``86400`` cannot park the connector for a day; the
attempt counter is the caller's, reset only after a request that did real work, or a
server that drops every watch at once is retried in a tight loop.
In full: docs/connectors.md, design notes: connectors/backoff.py.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Final


@dataclass(frozen=True)
class Backoff:
    """Delays after consecutive failures:
    ``uniform(0, min(max_seconds, initial_seconds * factor**n))``."""

    initial_seconds: float = 0.5
    max_seconds: float = 30.0
    factor: float = 2.0
    max_retry_after_seconds: float = 120.0
    """The longest Retry-After honoured; a longer one is cut to this."""

    def delay(self, attempt: int, draw: Callable[[], float] = random.random) -> float:
        """Seconds to wait after failure number ``attempt`` (0-based); ``draw`` gives [0, 1)."""
        ceiling = min(self.max_seconds, self.initial_seconds * self.factor ** min(attempt, 64))
        return ceiling * draw()

    def after(
        self, attempt: int, retry_after: float | None, draw: Callable[[], float] = random.random
    ) -> float:
        """The server's Retry-After (capped) when given, else :meth:`delay`."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after_seconds)
        return self.delay(attempt, draw)


_DIGITS: Final = re.compile(r"[0-9]+")
MAX_RETRY_AFTER_SECONDS: Final = 3600.0
"""The longest ``Retry-After`` :func:`parse_retry_after` returns: longer ones are cut to it."""


def retry_after_seconds(
    headers: Mapping[str, str], now: datetime | None = None, limit: float = MAX_RETRY_AFTER_SECONDS
) -> float | None:
    """The ``Retry-After`` header in seconds (see :func:`parse_retry_after`)."""
    return parse_retry_after(headers.get("Retry-After"), now, limit)


def parse_retry_after(
    value: str | None, now: datetime | None = None, limit: float = MAX_RETRY_AFTER_SECONDS
) -> float | None:
    """A ``Retry-After`` value in seconds from ``now``, at most ``limit``; None when absent
    or unreadable (the caller's own backoff applies).

    RFC 9110 §10.2.3: ``delay-seconds`` (``1*DIGIT``: no sign, no decimals) or an
    HTTP-date (IMF-fixdate, or the obsolete RFC 850 and asctime forms that
    :func:`email.utils.parsedate_to_datetime` reads; a date in the past is 0). Traps:
    ``float()`` would read ``"inf"``, ``"nan"`` and ``"-1"`` (a NaN compares false with
    everything and slips through ``max``/``min``; an infinity parks a connector for
    ever), so only digits count, and the result must be finite and non-negative; a
    huge one (a proxy's ``86400``, a far-off date) is cut to ``limit``.
    """
    if value is None:
        return None
    text = value.strip()
    if _DIGITS.fullmatch(text):
        try:
            seconds = float(int(text))
        except (ValueError, OverflowError):  # over int()'s digit limit, or float's range
            return limit
    else:
        date = _date_seconds(text, now)
        if date is None:
            return None
        seconds = date
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return min(seconds, limit)


def _date_seconds(text: str, now: datetime | None) -> float | None:
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": the RFC's dates are GMT
        when = when.replace(tzinfo=UTC)
    return max((when - (now or datetime.now(UTC))).total_seconds(), 0.0)
