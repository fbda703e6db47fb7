"""Conversions between event time (timezone-aware datetimes) and float seconds.

The rules compare floats (cheap); records carry datetimes. Converting a float
back is only needed when a *timer* produces a revision (there is no event whose
``time`` we could reuse). ``fromtimestamp`` with an explicit UTC zone is
deterministic: it reads no clock and no local timezone.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

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
