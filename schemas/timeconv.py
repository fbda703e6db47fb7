"""Conversions between event time (timezone-aware datetimes) and float seconds.

The rules compare floats (cheap); records carry datetimes. Every datetime the core and
the router (:mod:`schemas.keys`) read becomes seconds through :func:`to_seconds`, one
conversion everywhere: declared here, the bottom layer, so both may import it (the core
through ``streams.core.timeconv``). Converting a float back is only needed when a
*timer* produces a revision (there is no event whose ``time`` we could reuse).
``fromtimestamp`` with an explicit UTC zone is deterministic: it reads no clock and no
local timezone. Trap: a naive datetime (never decoded: the codec requires a zone, but a
caller can build one) is read in the local zone by :func:`to_seconds`, as
``timestamp()`` reads it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_EXACT: Final = float(1 << 53)
"""Microsecond counts below this are exact as doubles: one division rounds them once."""
_FIRST: Final = datetime.min.replace(tzinfo=UTC)
_LAST: Final = datetime.max.replace(tzinfo=UTC)
_FIRST_SECONDS: Final = _FIRST.timestamp()
_LAST_SECONDS: Final = float(int(_LAST.timestamp()) - 1)
"""23:59:59 of the last day: the float of ``datetime.max`` itself rounds up into year 10000."""


def to_datetime(seconds: float) -> datetime:
    """Event-time seconds since the epoch as a UTC datetime, saturated at ``datetime``'s range.

    Why saturate: the rules add windows and the grace to event times, and an event time
    in the last day of year 9999 is valid (:data:`schemas.types.TIME_CEILING`; only the
    processor refuses it, relative to its clock, and replay has no clock): the sum is
    past what a datetime can hold, ``fromtimestamp`` raised, and the key's state was
    left half-updated. An instant that far out is nobody's real time; the edge is as
    good a stand-in as any. NaN saturates high.
    """
    if _FIRST_SECONDS <= seconds < _LAST_SECONDS:
        return datetime.fromtimestamp(seconds, tz=UTC)
    return _FIRST if seconds < _FIRST_SECONDS else _LAST


def to_seconds(stamp: datetime) -> float:
    """``stamp.timestamp()``, bit for bit, in fewer steps for an aware datetime.

    Why: it runs for every ingested event, and ``timestamp()`` builds its microseconds
    with Python integer arithmetic (a few objects per call). What it computes for an aware
    datetime is ``(stamp - epoch)`` in microseconds divided by 10**6, correctly rounded;
    the same count made of the difference's three fields, divided as doubles, rounds
    once and so gives the same float while the count is exact as a double (2**53
    microseconds: until the year 2255). Further out (the rules saturate times up to the
    year 9999), and for a naive datetime (which ``timestamp()`` reads in local time, and
    ``-`` refuses), it asks ``timestamp()`` itself.
    """
    try:
        delta = stamp - _EPOCH
    except TypeError:
        return stamp.timestamp()
    # In doubles from the whole seconds on: exact while below 2**53, and a compiled
    # core's integer product of that size would go through Python integers again.
    micro = (delta.days * 86400 + delta.seconds) * 1e6 + delta.microseconds
    if -_EXACT < micro < _EXACT:
        return micro / 1e6
    return stamp.timestamp()
