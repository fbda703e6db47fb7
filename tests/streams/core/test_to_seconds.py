"""The engine's conversion of event times to seconds is ``datetime.timestamp()``, bit for bit.

``streams.core.timeconv.to_seconds`` computes the float from the difference to the epoch
instead of calling ``timestamp()`` (which runs for every ingested event); a float that
differed in its last bit would reorder events at one instant or move a window's edge.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.timeconv import to_seconds

_OFFSETS = st.integers(min_value=-1439, max_value=1439).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)
_AWARE = st.datetimes(
    min_value=datetime(1, 1, 2),  # hypothesis takes naive bounds
    max_value=datetime(9999, 12, 30),
    timezones=st.one_of(st.just(UTC), _OFFSETS),
)


@settings(max_examples=3000, deadline=None)
@given(_AWARE)
def test_to_seconds_is_timestamp(stamp: datetime) -> None:
    assert to_seconds(stamp) == stamp.timestamp()


def test_to_seconds_at_the_edges() -> None:
    """Sub-second times near now (where the division must round as ``timestamp()``
    does), before the epoch, past the doubles' exact microseconds (2**53: year 2255),
    the last microsecond a datetime holds, and a naive datetime (local time)."""
    stamps = [
        datetime(2025, 3, 3, 8, 0, 0, 40632, tzinfo=UTC),
        datetime(2025, 3, 3, 8, 0, 0, 999999, tzinfo=UTC),
        datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(1, 1, 2, 0, 0, 0, 1, tzinfo=UTC),
        datetime(2255, 6, 5, 23, 47, 34, 740993, tzinfo=UTC),
        datetime(2255, 6, 5, 23, 47, 34, 740992, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2025, 3, 3, 8, 0, 0, 123457, tzinfo=timezone(timedelta(hours=-7))),
        datetime(2025, 3, 3, 8, 0, 0, 123457),  # naive: timestamp() reads local time
    ]
    for stamp in stamps:
        assert to_seconds(stamp) == stamp.timestamp(), stamp
