"""The group discipline the worker and the bridges share (streams/app/group.py), alone.

The consumer here is a stand-in for aiokafka's (its commit answers as the broker would);
the worker's and the bridges' own tests run the same code against a broker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import CommitFailedError, KafkaConnectionError
from aiokafka.structs import OffsetAndMetadata

from streams.app.group import Listener, commit, committable
from streams.app.offsets import PartitionOffsets

A = TopicPartition("t", 0)
B = TopicPartition("t", 1)
C = TopicPartition("t", 2)
log = logging.getLogger("test.group")


class Member:
    def __init__(self, lock: asyncio.Lock, fail: bool = False) -> None:
        self.lock = lock
        self.fail = fail
        self.calls: list[tuple[str, bool]] = []

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        self.calls.append(("revoked", self.lock.locked()))

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        self.calls.append(("assigned", self.lock.locked()))
        if self.fail:
            raise RuntimeError("restore failed")


@pytest.mark.asyncio
async def test_the_listener_runs_callbacks_under_the_lock_and_keeps_a_failure() -> None:
    lock = asyncio.Lock()
    kept: list[BaseException] = []
    member = Member(lock)
    listener = Listener(member, lock, kept.append)
    await listener.on_partitions_revoked({A})
    await listener.on_partitions_assigned({A})
    assert member.calls == [("revoked", True), ("assigned", True)]
    assert not lock.locked()
    member.fail = True
    with pytest.raises(RuntimeError, match="restore failed"):
        await listener.on_partitions_assigned({A})
    assert [str(e) for e in kept] == ["restore failed"], "kept for the member's loop"
    assert not lock.locked()


def test_committable_is_the_lowest_unfinished_offset_and_skips_what_is_committed() -> None:
    trackers = {A: PartitionOffsets(), B: PartitionOffsets(), C: PartitionOffsets()}
    trackers[A].extend(range(10, 15))
    for offset in (10, 11, 13):
        trackers[A].release(offset)
    trackers[B].extend(range(3))
    for offset in range(3):
        trackers[B].release(offset)
    assert committable(trackers) == {A: OffsetAndMetadata(12, ""), B: OffsetAndMetadata(3, "")}
    assert committable(trackers, {A: 12}) == {B: OffsetAndMetadata(3, "")}, "A unchanged"


class Consumer:
    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.committed: list[dict[TopicPartition, OffsetAndMetadata]] = []

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        if self.error is not None:
            raise self.error
        self.committed.append(dict(offsets))


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("error", "said"),
    [
        (None, None),
        (CommitFailedError("rebalanced"), "commit skipped"),
        (KafkaConnectionError("gone"), "commit failed"),
    ],
)
async def test_a_refused_commit_is_said_once_and_never_raised(
    error: Exception | None, said: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    consumer = Consumer(error)
    offsets = {A: OffsetAndMetadata(5, "")}
    with caplog.at_level(logging.WARNING, logger="test.group"):
        done = await commit(consumer, offsets, log)
    assert done is (error is None)
    assert consumer.committed == ([offsets] if error is None else [])
    lines = [r.getMessage() for r in caplog.records if r.name == "test.group"]
    assert [line.split(" (")[0] for line in lines] == ([said] if said else [])
    assert await commit(consumer, {}, log) is False
