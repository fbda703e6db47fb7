"""When an announced partition may stop holding the watermark (streams/app/announced.py).

Receipt times are given explicitly: the rule is about their order, not the clock."""

from __future__ import annotations

from streams.app.announced import FetchesAfter

A = ("raw.pods", 1)
B = ("raw.pods", 2)
READ_AT = 1_000.0
"""When the announcement was read (epoch seconds): 1,000,000 ms."""


def test_the_second_response_after_the_announcement_is_the_first_that_counts() -> None:
    fetches = FetchesAfter()
    announced = {A: READ_AT}
    assert fetches.ready(announced, {A: None}) == [], "never fetched"
    assert fetches.ready(announced, {A: 999_000}) == [], "received before it was read"
    assert fetches.ready(announced, {A: 1_000_000}) == [], "the same millisecond: not after"
    assert fetches.ready(announced, {A: 1_000_100}) == [], "the first after: maybe sent before"
    assert fetches.ready(announced, {A: 1_000_100}) == [], "no new response yet"
    assert fetches.ready(announced, {A: 1_000_600}) == [A]


def test_partitions_are_independent_and_forgotten_once_no_longer_announced() -> None:
    fetches = FetchesAfter()
    fetches.ready({A: READ_AT, B: READ_AT}, {A: 1_000_100, B: 1_000_100})
    assert fetches.ready({A: READ_AT, B: READ_AT}, {A: 1_000_200, B: 1_000_100}) == [A]
    # A settled (no longer announced); announced again later, it starts over.
    assert fetches.ready({B: READ_AT}, {B: 1_000_300}) == [B]
    assert fetches.ready({A: 2_000.0}, {A: 2_000_100}) == []
    assert fetches.ready({A: 2_000.0}, {A: 2_000_200}) == [A]
