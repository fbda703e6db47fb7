"""A worker settles an announcement of a partition that holds nothing of its source.

The publish loop announces a partition before its progress covers it (schemas/progress.py);
a worker holds its watermark for an announced partition until it hears the source there,
or has read the partition to an end fetched after the announcement (the worker's
``_settle_announced``, streams/app/announced.py). This test is the second case on a real
broker: source ``a`` names a partition it never published to (what a restarted worker
sees when the source's records there were committed long ago). With the settle, the
incidents come at once; without it, the watermark would wait for the entry to age out
(``source_idle_seconds``, 600 s here), far past the test's deadline.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

from aiokafka import AIOKafkaProducer

from schemas import progress as wire
from schemas.codec import AnyEvent, encode
from schemas.events import Tick
from schemas.keys import correlation_key
from streams.app.changelog import partition_for
from tests.core_helpers import route_all
from tests.factories import Cluster, term
from tests.kafka_helpers import PARTITIONS, KafkaTestEnv, wait_until
from tests.processor_helpers import TopicReader, Worker, ending_days_ago, final, reference


def oom() -> list[AnyEvent]:
    c = Cluster()
    c.node("n", 0)
    c.pod("n", "p", 1)
    c.pod("n", "p", 60, restarts=1, last=term(59, "OOMKilled", 137))
    return ending_days_ago(c.events)


async def publish(kafka: KafkaTestEnv, events: list[AnyEvent]) -> tuple[str, int]:
    """``a``'s records, signed as delivered up to past them, then its announcement on every
    partition it used, naming one more: returns that extra (topic, partition)."""
    layout = kafka.layout
    progress = max(e.time for e in events) + timedelta(minutes=30)
    signed = wire.headers("a", progress)
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, acks="all")
    await producer.start()
    try:
        used: set[tuple[str, int]] = set()
        futures = []
        for event in route_all(events):
            topic, key = layout.raw_topic(event), correlation_key(event)
            partition = partition_for(key, PARTITIONS)
            used.add((topic, partition))
            futures.append(
                await producer.send(
                    topic, encode(event), key=key.encode(), partition=partition, headers=signed
                )
            )
        await asyncio.gather(*futures)
        xid = layout.raw["xids"].name
        extra = next((xid, p) for p in range(PARTITIONS) if (xid, p) not in used)
        named = [*signed, (wire.PARTITIONS_HEADER, wire.encode_partitions({*used, extra}))]
        tick = encode(Tick(id="heartbeat:a", cluster="c1", time=progress))
        await asyncio.gather(
            *[await producer.send(t, tick, partition=p, headers=named) for t, p in sorted(used)]
        )
        return extra
    finally:
        await producer.stop()


def test_an_announced_partition_read_to_its_end_stops_holding_the_watermark(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    kafka.create_topics()
    events = oom()
    expected = reference(events)
    assert expected, "the scenario opens an incident"
    reader = TopicReader(kafka, kafka.layout.incidents.name)
    worker = Worker(
        kafka,
        f"{kafka.prefix}-app",
        tmp_path / "worker.log",
        {"GPUTRIAGE_PROCESSOR__SOURCE_IDLE_SECONDS": "600"},
    )
    try:
        asyncio.run(publish(kafka, events))

        def arrived() -> bool:
            reader.poll()
            got = final(reader.incidents())
            return all(i in got and got[i].revision >= e.revision for i, e in expected.items())

        # Far below the 600 s after which the unheard entry would age out (without the
        # settle this times out: checked by removing it); it arrives in ~4 s here.
        wait_until(arrived, timeout=45, what="the incidents, the announcement settled")
    finally:
        reader.close()
        assert worker.stop() == 0, worker.log()
