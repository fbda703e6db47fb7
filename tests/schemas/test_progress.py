"""The progress headers (schemas/progress.py): what a connector signs its records with."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from schemas import progress as wire

T = datetime(2026, 12, 1, 8, 0, 0, 123_456, tzinfo=UTC)


def test_headers_round_trip_to_the_millisecond() -> None:
    headers = wire.headers("kmsg:/dev/kmsg@c1/n1", T)
    assert headers == [
        ("gputriage-source", b"kmsg:/dev/kmsg@c1/n1"),
        ("gputriage-progress", b"1796112000123"),
    ]
    assert wire.read(headers) == (b"kmsg:/dev/kmsg@c1/n1", T.timestamp() // 0.001 / 1000)


def test_progress_is_floored_never_rounded_up() -> None:
    """A lower bound must stay one: 0.9996 ms rounded up would vouch for time not delivered."""
    almost = T.replace(microsecond=999_999)
    [_, (_, value)] = wire.headers("s", almost)
    assert int(value) / 1000 <= almost.timestamp()
    assert int(value) / 1000 > almost.timestamp() - 0.001


def test_other_headers_are_ignored_and_none_is_none() -> None:
    assert wire.read([]) is None
    assert wire.read([("traceparent", b"00-abc")]) is None
    mixed = [("traceparent", b"x"), *wire.headers("s", T), ("other", b"")]
    assert wire.read(mixed) == (b"s", wire.read(wire.headers("s", T))[1])  # type: ignore[index]


def test_a_source_without_progress_yet_holds_everything() -> None:
    assert wire.read([(wire.SOURCE_HEADER, b"s")]) == (b"s", -math.inf)


@pytest.mark.parametrize(
    "headers",
    [
        [(wire.PROGRESS_HEADER, b"1796112000123")],  # progress without a source
        [(wire.SOURCE_HEADER, b""), (wire.PROGRESS_HEADER, b"1")],  # an empty source id
        [(wire.SOURCE_HEADER, b"\xff\xfe"), (wire.PROGRESS_HEADER, b"1")],  # not UTF-8
        [(wire.SOURCE_HEADER, b"s"), (wire.PROGRESS_HEADER, b"1.5")],  # not an integer
        [(wire.SOURCE_HEADER, b"s"), (wire.PROGRESS_HEADER, b"-1")],  # before the epoch
        [(wire.SOURCE_HEADER, b"s"), (wire.PROGRESS_HEADER, b"")],
        [(wire.SOURCE_HEADER, b"s"), (wire.PROGRESS_HEADER, b"\xd9\xa3")],  # Arabic-Indic 3
        [(wire.SOURCE_HEADER, None), (wire.PROGRESS_HEADER, b"1")],  # aiokafka allows None
        [(wire.SOURCE_HEADER, b"s"), (wire.PROGRESS_HEADER, None)],
    ],
)
def test_malformed_headers_are_reported_as_such_never_raised(
    headers: list[tuple[str, bytes]],
) -> None:
    assert wire.read(headers) == wire.MALFORMED


def test_progress_is_milliseconds_since_the_epoch_in_ascii() -> None:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    assert wire.encode_progress(epoch + timedelta(seconds=1.5)) == b"1500"


def test_an_ended_source_holds_nothing() -> None:
    assert wire.read([(wire.SOURCE_HEADER, b"s"), (wire.PROGRESS_HEADER, wire.END)]) == (
        b"s",
        math.inf,
    )


def test_an_announcement_names_partitions_per_topic_in_stable_bytes() -> None:
    named = {("raw.pods", 3), ("raw.pods", 0), ("raw.autoscaler", 7)}
    value = wire.encode_partitions(named)
    assert value == b"raw.autoscaler:7;raw.pods:0,3"
    assert wire.read_partitions([(wire.PARTITIONS_HEADER, value)]) == named
    assert wire.read_partitions(wire.headers("s", datetime(2026, 1, 1, tzinfo=UTC))) == set()


@pytest.mark.parametrize(
    "value", [b"", b"raw.pods", b"raw.pods:", b":1", b"raw.pods:1,x", b"raw.pods:-1", b"\xff", None]
)
def test_a_malformed_announcement_names_nothing_and_never_raises(value: bytes | None) -> None:
    assert wire.read_partitions([(wire.PARTITIONS_HEADER, value)]) == frozenset()  # type: ignore[list-item]
