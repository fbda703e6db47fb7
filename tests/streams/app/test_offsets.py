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


class _Reference:
    """The rule itself, spelled out: the lowest offset read and not released, else the
    read position (every record read once, re-reads below the position ignored)."""

    def __init__(self) -> None:
        self.read: set[int] = set()
        self.released: set[int] = set()
        self.next_offset: int | None = None

    def add(self, offset: int) -> None:
        if self.next_offset is None or offset >= self.next_offset:
            self.read.add(offset)
            self.next_offset = offset + 1

    def committable(self) -> int | None:
        held = self.read - self.released
        return min(held) if held else self.next_offset


_steps = st.lists(
    st.one_of(
        st.tuples(st.just("batch"), st.integers(-5, 8), st.integers(1, 12), st.booleans()),
        st.tuples(st.just("release"), st.integers(0, 120), st.just(0), st.just(False)),
        st.tuples(st.just("commit"), st.just(0), st.just(0), st.just(False)),
    ),
    max_size=40,
)


@given(st.integers(min_value=0, max_value=50), _steps)
def test_the_commit_follows_the_rule_through_gaps_re_reads_and_commits(
    start: int, steps: list[tuple[str, int, int, bool]]
) -> None:
    """Batches that skip offsets (a gap in the log), overlap the read position (a re-read
    after a seek) or come as a ``range``, releases in any order (of offsets read or not),
    and commits in between: the committable offset is always the rule's."""
    offsets, model = PartitionOffsets(), _Reference()
    position = start
    for kind, a, b, flag in steps:
        if kind == "batch":
            first = max(0, position + a)  # before the position: a re-read; past it: a gap
            batch: list[int] | range = (
                range(first, first + b) if flag else list(range(first, first + 2 * b, 2))
            )
            offsets.extend(batch)
            for offset in batch:
                model.add(offset)
            position = max(position, batch[-1] + 1)
        elif kind == "release":
            offset = start + a
            offsets.release(offset)
            if offset in model.read:
                model.released.add(offset)
        else:
            assert offsets.committable() == model.committable()
        assert offsets.next_offset == model.next_offset
    assert offsets.committable() == model.committable()
    assert offsets.outstanding == len(model.read - model.released)


def test_a_read_position_set_from_outside_starts_the_bytes_at_the_first_offset_added() -> None:
    """The faust engine sets ``next_offset`` to where it starts reading, with nothing
    outstanding: the next batch may start there or past it (a gap)."""
    offsets = PartitionOffsets()
    offsets.next_offset = 1_000_000
    assert offsets.committable() == 1_000_000
    offsets.extend(range(1_000_005, 1_000_008))
    assert offsets.committable() == 1_000_005
    offsets.release(1_000_005)
    offsets.release(1_000_006)
    assert offsets.committable() == 1_000_007
    offsets.release(1_000_007)
    assert offsets.committable() == 1_000_008
    assert offsets.outstanding == 0
