"""Conversions between event time (timezone-aware datetimes) and float seconds.

The rules compare floats (cheap); records carry datetimes. Converting a float
back is only needed when a *timer* produces a revision (there is no event whose
``time`` we could reuse). ``fromtimestamp`` with an explicit UTC zone is
deterministic: it reads no clock and no local timezone.
"""

from __future__ import annotations

from datetime import UTC, datetime


def to_datetime(seconds: float) -> datetime:
    """Event-time seconds since the epoch as a UTC datetime."""
    return datetime.fromtimestamp(seconds, tz=UTC)
