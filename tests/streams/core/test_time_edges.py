"""No event time the codec accepts can raise in the core, at either end of the range.

The codec accepts instants from the Unix epoch to the end of year 9999 UTC, in any
offset (:data:`schemas.types.TIME_FLOOR`, :data:`~schemas.types.TIME_CEILING`). Before
the bounds, ``0001-01-01T00:00:00+14:00`` (year 0 in UTC) raised inside the core and
the next event on its key was lost; an event in the last day of 9999 made the core
convert a window's end in year 10000, and raise.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone

import pytest

from gputriage.demo.player import retime
from schemas.codec import AnyEvent, RecordError, decode_event, encode, try_decode_event
from schemas.types import TIME_CEILING, TIME_FLOOR
from streams.core import Correlator
from streams.core.snapshot import decode_state, encode_state
from streams.core.timeconv import to_datetime
from tests.core_helpers import config, feed
from tests.paths import ROOT

SCENARIO = ROOT / "examples" / "scenario.jsonl"
EAST = timezone(timedelta(hours=14))
WEST = timezone(timedelta(hours=-12))


def _scenario() -> list[AnyEvent]:
    return [decode_event(line) for line in SCENARIO.read_bytes().splitlines() if line.strip()]


def _moved(events: list[AnyEvent], delta: timedelta, zone: timezone) -> list[AnyEvent]:
    """``events`` moved by ``delta``, every time (nested ones too) written in ``zone``, then
    through the codec as every consumer reads them: each must still be accepted."""
    moved: list[AnyEvent] = []
    for event in events:
        shifted = retime(event, lambda t: (t + delta).astimezone(zone))
        decoded = try_decode_event(encode(shifted))
        assert not isinstance(decoded, RecordError), decoded
        moved.append(decoded)
    return moved


def _times(events: list[AnyEvent]) -> list[datetime]:
    found: list[datetime] = []

    def note(moment: datetime) -> datetime:
        found.append(moment)
        return moment

    for event in events:
        retime(event, note)
    return found


def _summary(correlator: Correlator, events: list[AnyEvent]) -> list[tuple[str, str, int, str]]:
    """Every revision (type, id, revision, status) of ``events``, every timer fired after.

    An ``allocation_mismatch`` has no anchoring event (it is about the whole cluster): its
    id hashes the time it began, so that id moves with the times; it is left out here.
    """
    out = [i for e in sorted(events, key=lambda e: e.time) for i in feed(correlator, e)]
    out += correlator.flush()
    out += correlator.advance(1e300)  # long after: every window closes, saturated
    for state in correlator.keys.values():
        assert decode_state(encode_state(state)) == state
    return sorted(
        (i.type, "" if i.type == "allocation_mismatch" else i.id, i.revision, i.status) for i in out
    )


EDGES: dict[str, Callable[[datetime, datetime], tuple[timedelta, timezone]]] = {
    # The latest time of the scenario at the last instant a zone can write in 9999.
    "end-of-9999-east": lambda first, last: (TIME_CEILING - timedelta(hours=14) - last, EAST),
    "end-of-9999-utc": lambda first, last: (TIME_CEILING - last, UTC),
    "end-of-9999-west": lambda first, last: (TIME_CEILING - last, WEST),
    # The earliest time of the scenario at the epoch itself.
    "epoch-east": lambda first, last: (TIME_FLOOR - first, EAST),
    "epoch-west": lambda first, last: (TIME_FLOOR - first, WEST),
}


@pytest.mark.parametrize("edge", EDGES)
def test_the_scenario_at_either_end_of_the_range_gives_the_same_incidents(edge: str) -> None:
    events = _scenario()
    times = _times(events)
    delta, zone = EDGES[edge](min(times), max(times))
    moved = _moved(events, delta, zone)
    assert _summary(Correlator(config()), moved) == _summary(Correlator(config()), events)


def test_a_time_past_the_range_never_reaches_the_core() -> None:
    """What the core saw before the bounds, and could not survive, is now a decode error."""
    line = (
        b'{"schema":"xid.v1","id":"x","cluster":"c1","time":"0001-01-01T00:00:00+14:00",'
        b'"node":"n1","code":79,"pci_bus_id":"0000:9b:00.0"}'
    )
    assert isinstance(try_decode_event(line), RecordError)


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (0.0, datetime(1970, 1, 1, tzinfo=UTC)),
        (TIME_CEILING.timestamp() - 1.5, datetime(9999, 12, 31, 23, 59, 58, 500000, tzinfo=UTC)),
        (TIME_CEILING.timestamp() + 86400, TIME_CEILING),  # a window's end past 9999
        (math.inf, TIME_CEILING),
        (math.nan, TIME_CEILING),
        (-1e300, datetime.min.replace(tzinfo=UTC)),
        (-math.inf, datetime.min.replace(tzinfo=UTC)),
    ],
)
def test_to_datetime_saturates_at_the_edges_of_datetime(seconds: float, expected: datetime) -> None:
    assert to_datetime(seconds) == expected
