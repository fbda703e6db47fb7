"""One consumer-group discipline for the applications on Kafka: the processor's worker and
the bridges (:mod:`streams.bridges`).

Auto-commit off; a member commits per partition only up to its lowest unfinished record
(:func:`committable`), so a crash re-reads exactly what was not done. Rebalance callbacks
go through one :class:`Listener`; :func:`commit` is the one commit and failure policy.

Traps: the callbacks run in aiokafka's coordinator task, so the :class:`Listener` holds
the lock the member holds over a batch's intake; aiokafka swallows a callback's exception,
so it is handed to the member (``failed``) to raise from its own loop; a commit refused
because a rebalance took the partitions is not an error (:func:`commit` returns False).
docs/operations.md, design notes: the consumer-group discipline.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError
from aiokafka.structs import OffsetAndMetadata

from streams.app.offsets import PartitionOffsets


class Member(Protocol):
    """A consumer-group member's rebalance callbacks (aiokafka's eager protocol: all is
    revoked, then the new assignment arrives), run under its lock by the :class:`Listener`."""

    async def on_revoked(self, revoked: set[TopicPartition]) -> None: ...

    async def on_assigned(self, assigned: set[TopicPartition]) -> None: ...


class Listener(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka is untyped
    """Hands aiokafka's rebalance callbacks to the member, under ``lock``; a callback's
    failure goes to ``failed`` and is raised (for aiokafka to log)."""

    def __init__(
        self, member: Member, lock: asyncio.Lock, failed: Callable[[BaseException], None]
    ) -> None:
        self.member = member
        self.lock = lock
        self.failed = failed

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._guarded(self.member.on_revoked(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self._guarded(self.member.on_assigned(assigned))

    async def _guarded(self, callback: Awaitable[None]) -> None:
        try:
            async with self.lock:
                await callback
        except BaseException as exc:
            self.failed(exc)
            raise


def group_consumer(
    client_kwargs: Mapping[str, Any],
    *,
    group_id: str,
    session_timeout_seconds: float,
    **extra: Any,
) -> AIOKafkaConsumer:
    """A consumer in ``group_id`` that never commits on its own and starts a partition
    without a commit at its beginning; heartbeats at a third of the session, at most 1 s."""
    return AIOKafkaConsumer(
        **client_kwargs,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=int(session_timeout_seconds * 1000),
        heartbeat_interval_ms=int(min(1.0, session_timeout_seconds / 3) * 1000),
        **extra,
    )


def committable(
    trackers: Mapping[TopicPartition, PartitionOffsets],
    committed: Mapping[TopicPartition, int] | None = None,
) -> dict[TopicPartition, OffsetAndMetadata]:
    """Each partition's committable offset, leaving out those with nothing read and, given
    ``committed``, those already committed there."""
    commits = {}
    for tp, tracker in trackers.items():
        offset = tracker.committable()
        if offset is not None and (committed is None or committed.get(tp) != offset):
            commits[tp] = OffsetAndMetadata(offset, "")
    return commits


async def commit(
    consumer: AIOKafkaConsumer,
    commits: Mapping[TopicPartition, OffsetAndMetadata],
    log: logging.Logger,
) -> bool:
    """Commit ``commits``; False (logged on the member's ``log``, never raised) when the
    broker refused them."""
    if not commits:
        return False
    try:
        await consumer.commit(dict(commits))
    except (CommitFailedError, IllegalStateError) as exc:
        # A rebalance took the partitions: their next owner re-reads from the previous
        # commit (the processor's key high-water marks, the bridges' ledger, skip what
        # is done).
        log.warning("commit skipped (%s); the next owner re-reads those records", exc)
        return False
    except KafkaError as exc:
        log.warning("commit failed (%r); records will be re-read after a restart", exc)
        return False
    return True
