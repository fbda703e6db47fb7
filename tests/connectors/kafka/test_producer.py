"""EventProducer: typed events land on their raw topics, keyed by correlation key, decodable."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from datetime import timedelta

import msgspec
import pytest
from aiokafka.partitioner import DefaultPartitioner

from connectors.kafka.producer import EventProducer
from schemas.codec import AnyEvent, decode_dead_letter, decode_event
from schemas.dead_letters import DeadLetter
from schemas.events import NodeEvent, Tick, XidEvent
from schemas.keys import correlation_key
from tests.core_helpers import route_all
from tests.kafka_helpers import KafkaTestEnv, consume_all
from tests.sample_records import SAMPLES


def _events() -> list[AnyEvent]:
    """Every sample but the tick, plus more events on several nodes and clusters."""
    events: list[AnyEvent] = [s for s in SAMPLES if not isinstance(s, Tick)]  # type: ignore[misc]
    xid = next(s for s in SAMPLES if isinstance(s, XidEvent))
    node = next(s for s in SAMPLES if isinstance(s, NodeEvent))
    for i in range(12):
        where = {"cluster": f"c{i % 2}", "node": f"gpu-node-{i}"}
        events.append(
            msgspec.structs.replace(xid, id=f"x{i}", time=xid.time + timedelta(seconds=i), **where)
        )
        events.append(msgspec.structs.replace(node, id=f"n{i}", **where))
    return events


@pytest.mark.asyncio
async def test_events_round_trip_through_their_raw_topics(kafka: KafkaTestEnv) -> None:
    await kafka.acreate_topics()
    layout = kafka.layout
    events = _events()
    # What goes on the wire: every event, and the copies the cluster key needs.
    wire = route_all([*events[1:], events[0]])  # in the order they are sent below
    assert len(wire) > len(events), "the sample has GPU pods, nodes and bindings"

    async with EventProducer(kafka.kwargs, layout) as producer:
        count = await producer.send_many(events[1:])
        first = await producer.send(events[0])
        assert producer.sent == len(wire)
    assert count == len(route_all(events[1:]))
    assert first.topic == layout.raw_topic(events[0])

    records = await consume_all(kafka.bootstrap, list(layout.raw_topics), len(wire))
    assert len(records) == len(wire)
    seen: list[AnyEvent] = []
    partition_of_key: dict[bytes, set[int]] = defaultdict(set)
    for record in records:
        event = decode_event(record.value)
        seen.append(event)
        assert record.topic == layout.raw_topic(event)
        assert record.key == correlation_key(event).encode()
        partition_of_key[record.key].add(record.partition)
    order = lambda e: (e.id, getattr(e, "scope", ""))  # noqa: E731
    assert sorted(seen, key=order) == sorted(wire, key=order)
    # Co-partitioning: one correlation key is on the same partition number in
    # every raw topic (same count, same default partitioner), which is what lets
    # one worker own all the signals of a node.
    assert all(len(partitions) == 1 for partitions in partition_of_key.values())
    assert len({p for ps in partition_of_key.values() for p in ps}) > 1, "keys spread out"


def test_a_tick_has_no_topic(kafka: KafkaTestEnv) -> None:
    tick = next(s for s in SAMPLES if isinstance(s, Tick))
    producer = EventProducer(kafka.kwargs, kafka.layout)
    with pytest.raises(TypeError, match="Tick"):
        producer.route(tick)


@pytest.mark.asyncio
async def test_a_dead_letter_of_a_huge_object_is_cut_to_fit_and_delivered(
    kafka: KafkaTestEnv,
) -> None:
    """Poison records on the connectors' side: a Kubernetes object may be 1.5 MiB (etcd's
    limit) and a rejected one is dead-lettered whole; base64 makes that ~2 MB, which the
    producer refuses (MessageSizeTooLargeError) and the publish loop would retry forever.
    The letter is cut to its head, with the original size and hash, and delivered."""
    await kafka.acreate_topics()
    value = b"{" + b"x" * 1_500_000
    letter = DeadLetter(
        topic="kubernetes/pods", partition=-1, offset=-1, reason="too big", value=value
    )
    async with EventProducer(kafka.kwargs, kafka.layout) as producer:
        assert await producer.send_dead_letters([letter]) == 1
    [record] = await consume_all(kafka.bootstrap, [kafka.layout.dead_letters.name], 1)
    got = decode_dead_letter(record.value)
    assert got.value_size == len(value)
    assert got.value_sha256 == hashlib.sha256(value).hexdigest()
    assert got.value is not None
    assert value.startswith(got.value)


@pytest.mark.asyncio
async def test_batches_built_here_keep_the_default_partitioner_and_the_order_per_key(
    kafka: KafkaTestEnv,
) -> None:
    """send_many builds its own batches (for speed): each key must still land where
    aiokafka's (and Java's) default partitioner puts it, which is where the processor
    looks for its state, and records of one key must keep their order across the many
    batches a chunk far over the 16 KB batch size fills."""
    await kafka.acreate_topics()
    xid = next(s for s in SAMPLES if isinstance(s, XidEvent))
    events: list[AnyEvent] = [
        msgspec.structs.replace(
            xid, id=f"o{i}", node=f"gpu-node-{i % 7}", time=xid.time + timedelta(seconds=i)
        )
        for i in range(3000)
    ]
    topic = kafka.layout.raw_topic(events[0])
    async with EventProducer(kafka.kwargs, kafka.layout) as producer:
        assert await producer.send_many(events) == len(events)
        partitions = sorted(await producer.producer.partitions_for(topic))
    records = await consume_all(kafka.bootstrap, [topic], len(events))
    by_key: dict[bytes, list[str]] = defaultdict(list)
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        assert record.partition == DefaultPartitioner()(record.key, partitions, partitions)
        by_key[record.key].append(decode_event(record.value).id)
    for key, ids in by_key.items():
        expected = [e.id for e in events if correlation_key(e).encode() == key]
        assert ids == expected, f"order of {key!r}"
    assert len(by_key) == 7
