"""What a worker given a partition holds against publishing a revision twice, on the real broker.

The end-to-end proof is the kill test (``test_kills.py``: 0 duplicated ``(id, revision)``
over six SIGKILLs, and a count of revisions not published again that must be > 0). These
pin the rules one by one: which revisions are held, how a mark is inherited, when the
inheritance ends.
"""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from aiokafka import AIOKafkaProducer, TopicPartition

from schemas.codec import encode
from schemas.incidents import Incident
from streams.app.published import Published, decode_mark, encode_mark, is_mark, mark_key
from tests.kafka_helpers import PARTITIONS, KafkaTestEnv, produce
from tests.sample_records import INCIDENT


def revision(n: int, incident_id: str = INCIDENT.id, summary: str = "") -> Incident:
    return msgspec.structs.replace(
        INCIDENT, id=incident_id, revision=n, summary=summary or INCIDENT.summary
    )


async def _published(kafka: KafkaTestEnv) -> Published:
    published = Published(kafka.kwargs, kafka.layout.incidents.name, PARTITIONS)
    await published.start()
    return published


def _raw(kafka: KafkaTestEnv, partition: int) -> list[TopicPartition]:
    return [TopicPartition(spec.name, partition) for spec in kafka.layout.raw.values()]


def test_marks_round_trip_under_a_key_no_correlation_key_has() -> None:
    key = mark_key(7)
    assert is_mark(key)
    assert not is_mark(b"c1/gpu-node-1")
    assert not is_mark(b"c1")
    assert decode_mark(key, encode_mark({0: 5, 2: 9})) == (7, {0: 5, 2: 9})
    assert decode_mark(key, b"{not json") is None
    assert decode_mark(b"\x00published/x", encode_mark({0: 1})) is None


@pytest.mark.asyncio
async def test_what_the_topic_holds_past_the_mark_is_not_published_again(
    kafka: KafkaTestEnv,
) -> None:
    await kafka.acreate_topics()
    topic = kafka.layout.incidents.name
    # Offsets before the mark: published before the predecessor's last flush.
    await produce(kafka.bootstrap, topic, [(b"inc-old", encode(revision(1, "inc-old")))])
    published = await _published(kafka)
    try:
        mark = published.bound()
        # One send of several records: one batch per partition (Tansu's end offset of a
        # partition is its last batch's base offset + 1; the whole batch must count).
        after = [revision(n) for n in (1, 2, 3)] + [revision(1, "inc-other")]
        await produce(kafka.bootstrap, topic, [(i.id.encode(), encode(i)) for i in after])
        read = await published.inherit({0: mark}, _raw(kafka, 0), 10)
        assert read == 4
        assert published.already_held(INCIDENT.id, 3, encode(revision(3)))  # the same bytes
        assert published.already_held(INCIDENT.id, 2, encode(revision(2)))  # superseded
        assert published.already_held(INCIDENT.id, 1, encode(revision(1, summary="else")))
        assert published.already_held("inc-other", 1, encode(revision(1, "inc-other")))
        assert published.suppressed == 4
        # Not held: newer, unknown, or before the mark.
        assert not published.already_held(INCIDENT.id, 4, encode(revision(4)))
        assert not published.already_held("inc-new", 1, encode(revision(1, "inc-new")))
        assert not published.already_held("inc-old", 1, encode(revision(1, "inc-old")))
        # The same revision with other bytes is a determinism bug: published, and counted.
        assert not published.already_held(INCIDENT.id, 3, encode(revision(3, summary="else")))
        assert published.differing == 1
    finally:
        await published.stop()


@pytest.mark.asyncio
async def test_a_mark_is_inherited_until_the_commit_passes_what_the_predecessor_read(
    kafka: KafkaTestEnv,
) -> None:
    await kafka.acreate_topics()
    raw = _raw(kafka, 1)
    producer = AIOKafkaProducer(**kafka.kwargs, acks="all")
    await producer.start()
    try:  # three records on raw partition 1 of the first raw topic: what was there
        sent = [await producer.send(raw[0].topic, b"{}", partition=1) for _ in range(3)]
        assert [r.offset for r in await asyncio.gather(*sent)] == [0, 1, 2]
    finally:
        await producer.stop()
    topic = kafka.layout.incidents.name
    await produce(kafka.bootstrap, topic, [(b"inc-a", encode(revision(1, "inc-a")))] * 2)
    published = await _published(kafka)
    try:
        own = published.bound()
        assert sum(own.values()) >= 1  # the incident topic's end, asked at the start
        theirs = dict.fromkeys(own, 0)  # the predecessor's mark: before everything
        await published.inherit({1: theirs}, raw, 10)
        assert published.mark(1) == theirs  # the least of ours and theirs
        assert published.mark(0) == own  # not gained: our own
        assert published.already_held("inc-a", 1, encode(revision(1, "inc-a")))

        ends = {tp: 3 if tp == raw[0] else 0 for tp in raw}
        published.committed({**ends, raw[0]: 2})  # not past the end it had when gained
        assert published.mark(1) == theirs
        published.committed(ends)
        assert published.mark(1) == own
        # Caught up everywhere: nothing is held any more (a revision made now is new).
        assert not published.already_held("inc-a", 1, encode(revision(1, "inc-a")))
    finally:
        await published.stop()


@pytest.mark.asyncio
async def test_a_lost_partition_no_longer_inherits(kafka: KafkaTestEnv) -> None:
    await kafka.acreate_topics()
    topic = kafka.layout.incidents.name
    records: list[tuple[bytes | None, bytes | None]] = [
        (f"inc-{k}".encode(), encode(revision(1, f"inc-{k}"))) for k in range(6)
    ]
    await produce(kafka.bootstrap, topic, records)  # so that our bound is not all zeros
    published = await _published(kafka)
    try:
        assert sum(published.bound().values()) >= 1
        await published.inherit({2: {0: 0, 1: 0, 2: 0}}, _raw(kafka, 2), 10)
        assert published.mark(2) == {0: 0, 1: 0, 2: 0}
        published.forget([2])
        assert published.mark(2) == published.bound()
    finally:
        await published.stop()
