"""When a partition has been read to an end fetched after a moment (streams/app/announced.py).

Receipt times are given explicitly: the rule is about their order, not the clock."""

from __future__ import annotations

import math

from streams.app.announced import Receipts

A = ("raw.pods", 1)
B = ("raw.pods", 2)
READ_AT_MS = 1_000_000.0
"""When the announcement (or a progress) was read: epoch ms."""


def test_the_second_response_after_a_moment_is_the_first_that_answers_a_later_request() -> None:
    receipts = Receipts()
    receipts.observe(A, None)
    assert receipts.after(A) == -math.inf, "never fetched"
    receipts.observe(A, 999_000)
    assert receipts.after(A) == -math.inf, "one response: its request's time is unknown"
    receipts.observe(A, 1_000_000)
    assert receipts.after(A) == 999_000, "answers a request sent after the one before"
    assert not receipts.after(A) > READ_AT_MS
    receipts.observe(A, 1_000_100)
    assert receipts.after(A) == 1_000_000, "the same millisecond is not after"
    assert not receipts.after(A) > READ_AT_MS
    receipts.observe(A, 1_000_100)
    assert receipts.after(A) == 1_000_000, "the same receipt again: no new response"
    receipts.observe(A, 1_000_600)
    assert receipts.after(A) > READ_AT_MS


def test_partitions_are_independent_and_forgotten_when_no_longer_assigned() -> None:
    receipts = Receipts()
    for stamp in (1_000_100, 1_000_200):
        receipts.observe(A, stamp)
    receipts.observe(B, 1_000_100)
    assert receipts.after(A) == 1_000_100
    assert receipts.after(B) == -math.inf
    receipts.forget([B])
    assert receipts.after(A) == -math.inf, "forgotten: it starts over"
    receipts.observe(B, 1_000_300)
    assert receipts.after(B) == 1_000_100


def test_seen_less_often_than_responses_arrive_it_claims_less() -> None:
    """Responses at 100, 200, 300 ms, looked at only at the first and the last: the
    "before" kept is the first (the truth, 200, is later): a smaller claim, never a
    larger one."""
    receipts = Receipts()
    receipts.observe(A, 1_000_100)
    receipts.observe(A, 1_000_300)
    assert receipts.after(A) == 1_000_100


def test_a_new_leader_or_a_clock_stepped_back_starts_over() -> None:
    """A request to a new leader may have left before the old one's last answer came;
    a receipt earlier than the last one means the wall clock went back: in both cases
    nothing is known of the latest response's request."""
    receipts = Receipts()
    receipts.observe(A, 1_000_100, leader=1)
    receipts.observe(A, 1_000_200, leader=1)
    assert receipts.after(A) == 1_000_100
    receipts.observe(A, 1_000_300, leader=2)
    assert receipts.after(A) == -math.inf, "moved to broker 2"
    receipts.observe(A, 1_000_400, leader=2)
    assert receipts.after(A) == 1_000_300
    receipts.observe(A, 900_000, leader=2)
    assert receipts.after(A) == -math.inf, "the clock went back"
