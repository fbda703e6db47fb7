"""Committable offsets when records are released out of offset order."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from streams.app.offsets import PartitionOffsets


def test_nothing_read_means_nothing_to_commit() -> None:
    assert PartitionOffsets().committable() is None


def test_a_held_record_holds_the_commit_behind_it() -> None:
    offsets = PartitionOffsets()
    for offset in (10, 11, 12):
        offsets.add(offset)
    offsets.release(11)
    offsets.release(12)
    assert offsets.committable() == 10, "10 is still held for the watermark"
    offsets.release(10)
    assert offsets.committable() == 13
    assert offsets.outstanding == 0


def test_a_re_read_below_the_position_is_not_counted_twice() -> None:
    offsets = PartitionOffsets()
    offsets.add(5)
    offsets.add(6)
    offsets.add(5)  # a fetch that overlapped the previous one
    offsets.release(5)
    offsets.release(6)
    assert offsets.committable() == 7


@given(
    st.integers(min_value=0, max_value=1000),
    st.lists(st.booleans(), min_size=1, max_size=60),
    st.randoms(use_true_random=False),
)
def test_the_commit_is_the_lowest_unreleased_offset(
    start: int, released: list[bool], rnd: random.Random
) -> None:
    offsets = PartitionOffsets()
    read = list(range(start, start + len(released)))
    for offset in read:
        offsets.add(offset)
    done = [o for o, r in zip(read, released, strict=True) if r]
    rnd.shuffle(done)
    for offset in done:
        offsets.release(offset)
    held = [o for o, r in zip(read, released, strict=True) if not r]
    assert offsets.committable() == (min(held) if held else read[-1] + 1)


@given(
    st.integers(min_value=0, max_value=1000),
    st.lists(st.integers(min_value=1, max_value=20), min_size=1, max_size=8),
    st.integers(min_value=0, max_value=30),
)
def test_extend_is_add_for_each_offset_re_reads_included(
    start: int, sizes: list[int], back: int
) -> None:
    """A fetched batch handed over at once counts as its records one by one, also when
    a seek made it overlap what was read before."""
    one, batched = PartitionOffsets(), PartitionOffsets()
    position = start
    for size in sizes:
        batch = list(range(position, position + size))
        for offset in batch:
            one.add(offset)
        batched.extend(batch)
        position = max(start, position + size - back)  # the next batch may re-read some
    assert batched.next_offset == one.next_offset
    assert batched.outstanding == one.outstanding
    for offset in range(start, position + 1, 2):
        one.release(offset)
        batched.release(offset)
    assert batched.committable() == one.committable()
