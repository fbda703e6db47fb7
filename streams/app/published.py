"""What the incident topic already holds: no revision published twice across a crash.

A worker killed between publishing revisions and its next flush leaves its successor to
make them again (byte-identical: the core is deterministic), and a pager would page twice.
Without broker transactions, each flush writes a *mark* per raw partition (an offset at or
below any incident published later); a worker given a partition scans the incident topic
from it and does not publish a revision already there or older than one there.

Traps: the mark is inherited until the successor has re-read past its predecessor's end;
the incident topic is compacted, so a revision below the highest held is never re-sent; a
partition without a mark suppresses nothing; the scan is bounded (copies, never a loss);
dead letters are not covered; Tansu's end offset may fall inside the last batch, so the
scan stops on the consumer's position. In full: docs/operations.md, design notes: what the
incident topic already holds.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Iterable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Final

import msgspec
from aiokafka import AIOKafkaConsumer, TopicPartition

from schemas.codec import RecordError, encode, typed_decoder
from streams.app.ranges import read_range

log = logging.getLogger("gputriage.processor")

MARK_PREFIX: Final = b"\x00published/"
"""The state-topic key prefix of marks: a correlation key never starts with NUL."""
MAX_SCAN_RECORDS: Final = 1_000_000
"""Incident records read at most in one assignment's scan."""
REFRESH_SECONDS: Final = 60.0
"""How often the incident partitions' end offsets are asked again (for :meth:`bound`)."""

Offsets = dict[int, int]
"""Incident partition -> offset."""


class _Mark(msgspec.Struct, frozen=True, tag_field="schema", tag="published-mark.v1"):
    offsets: dict[int, int]


class _Head(msgspec.Struct, frozen=True):
    """The one field of an incident the scan needs (the id is the record key)."""

    revision: int


_decode_mark = typed_decoder(_Mark)
_decode_head = typed_decoder(_Head)


def mark_key(partition: int) -> bytes:
    """The state-topic key of raw partition ``partition``'s mark."""
    return MARK_PREFIX + str(partition).encode()


def is_mark(key: bytes) -> bool:
    return key.startswith(MARK_PREFIX)


def encode_mark(offsets: Mapping[int, int]) -> bytes:
    return encode(_Mark(dict(offsets)))


def decode_mark(key: bytes, value: bytes) -> tuple[int, Offsets] | None:
    """``(raw partition, offsets)`` of a mark record; None (logged) if it does not read."""
    try:
        partition = int(key[len(MARK_PREFIX) :])
        return partition, dict(_decode_mark(value).offsets)
    except (ValueError, RecordError) as exc:
        log.error("mark %r does not decode (%s); nothing inherited from it", key, exc)
        return None


def _digest(value: bytes) -> bytes:
    return hashlib.blake2b(value, digest_size=16).digest()


@dataclass(slots=True)
class _Inherited:
    mark: Offsets
    """The predecessor's mark for this raw partition."""
    ends: dict[TopicPartition, int]
    """The raw topics' end offsets of this partition when it was gained (read: see
    :meth:`Published._log_ends`)."""


class Published:
    """One worker's marks and the revisions it must not publish again (module docstring)."""

    def __init__(self, client_kwargs: Mapping[str, Any], topic: str, partitions: int) -> None:
        self.topic = topic
        self._tps = [TopicPartition(topic, q) for q in range(partitions)]
        self._consumer = AIOKafkaConsumer(
            **client_kwargs,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=8 << 20,
            fetch_max_wait_ms=50,
        )
        self._acked: Offsets = {}
        """Incident partition -> the offset after this worker's last acknowledged revision."""
        self._asked: Offsets = {}
        """Incident partition -> its end offset when last asked."""
        self._asked_at = -REFRESH_SECONDS
        self._inherited: dict[int, _Inherited] = {}
        self._held: dict[bytes, tuple[int, bytes]] = {}
        """Incident id -> (highest revision on the topic, digest of its bytes), from scans."""
        self.suppressed = 0
        """Revisions not published again, since the start."""
        self.differing = 0
        """Revisions made again with bytes unlike the topic's copy (published anyway)."""

    async def start(self) -> None:
        await self._consumer.start()
        await self.refresh()

    async def stop(self) -> None:
        await self._consumer.stop()

    # -- the bound ---------------------------------------------------------------------
    def acked(self, partition: int, offset: int) -> None:
        """A revision of ours landed at ``offset`` of incident partition ``partition``."""
        if offset >= self._acked.get(partition, 0):
            self._acked[partition] = offset + 1

    async def refresh(self, *, every: float = 0.0) -> None:
        """Ask the incident partitions' end offsets (at most once per ``every`` seconds)."""
        now = asyncio.get_running_loop().time()  # the loop's clock (looptime in tests)
        if now - self._asked_at < every:
            return
        ends = await self._consumer.end_offsets(self._tps)
        self._asked = {tp.partition: offset for tp, offset in ends.items()}
        self._asked_at = now

    def bound(self) -> Offsets:
        """An offset per incident partition at or below any revision we publish from now."""
        acked = self._acked
        return {q: max(end, acked.get(q, 0)) for q, end in self._asked.items()}

    def mark(self, partition: int) -> Offsets:
        """The mark to write for raw partition ``partition`` (the inherited one while it
        holds: see the module's traps)."""
        own = self.bound()
        inherited = self._inherited.get(partition)
        if inherited is None:
            return own
        theirs = inherited.mark
        return {q: min(end, theirs.get(q, end)) for q, end in own.items()}

    def committed(self, commits: Mapping[TopicPartition, int]) -> None:
        """After a successful commit: partitions whose commit has passed what their
        predecessor could have read no longer inherit its mark."""
        for partition, inherited in list(self._inherited.items()):
            if all(commits.get(tp, -1) >= end for tp, end in inherited.ends.items()):
                del self._inherited[partition]
        if not self._inherited:
            self._held.clear()

    # -- assignments -------------------------------------------------------------------
    async def inherit(
        self,
        marks: Mapping[int, Offsets],
        raw: Iterable[TopicPartition],
        timeout_seconds: float,
    ) -> int:
        """Adopt the marks of gained raw partitions and scan the incident topic from them;
        the number of incident records read. ``raw``: the gained raw topic-partitions."""
        raw = [tp for tp in raw if tp.partition in marks]
        if not raw:
            return 0
        ends = await self._log_ends(raw, timeout_seconds)
        for partition, mark in marks.items():
            self._inherited[partition] = _Inherited(
                mark, {tp: end for tp, end in ends.items() if tp.partition == partition}
            )
        starts: Offsets = {}
        for mark in marks.values():
            for q, offset in mark.items():
                starts[q] = min(offset, starts.get(q, offset))
        return await self._scan(starts, timeout_seconds)

    async def _log_ends(
        self, tps: list[TopicPartition], timeout_seconds: float
    ) -> dict[TopicPartition, int]:
        """The offset after the last record of each partition, read, not asked: an end
        offset as Tansu answers it (its last batch's base + 1) would end an inheritance
        while the predecessor's last records are still to be re-read."""
        consumer = self._consumer
        asked = await consumer.end_offsets(tps)
        ends = dict(asked)
        remaining = {tp for tp in tps if asked[tp] > 0}
        consumer.assign(list(remaining))
        for tp in remaining:
            consumer.seek(tp, asked[tp] - 1)
        loop_time = asyncio.get_running_loop().time  # getmany's timeouts follow it too
        deadline = loop_time() + timeout_seconds
        while remaining and loop_time() < deadline:
            batches = await consumer.getmany(*remaining, timeout_ms=200)
            for tp, records in batches.items():
                if records:
                    ends[tp] = max(ends[tp], records[-1].offset + 1)
                    remaining.discard(tp)
        consumer.assign([])
        if remaining:  # the asked ends, then: a shorter inheritance, never a lost record
            log.warning(
                "reading the last records of %s took over %g s", sorted(remaining), timeout_seconds
            )
        return ends

    def forget(self, partitions: Iterable[int]) -> None:
        """Raw partitions lost in a rebalance: their marks are someone else's now."""
        for partition in partitions:
            self._inherited.pop(partition, None)
        if not self._inherited:
            self._held.clear()

    async def _scan(self, starts: Mapping[int, int], timeout_seconds: float) -> int:
        tps: dict[TopicPartition, int | None] = {
            tp: starts[tp.partition] for tp in self._tps if tp.partition in starts
        }
        held = self._held
        read = 0
        try:
            async with aclosing(read_range(self._consumer, tps, timeout_seconds)) as batches:
                async for records in batches:
                    for record in records:
                        if record.key is None or record.value is None:
                            continue
                        read += 1
                        try:
                            revision = _decode_head(record.value).revision
                        except RecordError:
                            continue  # not ours to judge: nothing to hold against
                        had = held.get(record.key)
                        if had is None or revision >= had[0]:
                            held[record.key] = (revision, _digest(record.value))
                    if read >= MAX_SCAN_RECORDS:
                        raise TimeoutError(f"over {MAX_SCAN_RECORDS} records")
        except TimeoutError as exc:
            log.warning(
                "read %d records of %s since the predecessors' marks and stopped there (%s): "
                "revisions they published later may be published again",
                read,
                self.topic,
                exc,
            )
        return read

    # -- publishing --------------------------------------------------------------------
    def already_held(self, incident_id: str, revision: int, value: bytes) -> bool:
        """Whether this revision must not be published: the topic holds it, or a newer one."""
        held = self._held
        if not held:
            return False
        had = held.get(incident_id.encode())
        if had is None or revision > had[0]:
            return False
        if revision == had[0] and _digest(value) != had[1]:
            self.differing += 1
            log.warning(
                "incident %s revision %d made again with other bytes than the topic's copy "
                "(the core is meant to be deterministic): published again",
                incident_id,
                revision,
            )
            return False
        self.suppressed += 1
        return True
