"""A quiet node agent says it is alive from its first heartbeat interval, restart or not.

A kernel-log reader on a healthy node publishes nothing (no XID, no reboot), and a dcgm
source on an idle one neither. Heartbeats used to go only to partitions a source had
published to in this process, so such a source was never heard, and one restarted (a
DaemonSet rollout) after it once published was heard no more: the processor's
``monitoring_gap`` would call it silent. A node source announces its own key's partition
at start (the producer's partitioner: where its records would go) and heartbeats there.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from connectors.kafka.producer import EventProducer, partition_of
from connectors.publish import Publisher, PublishOptions
from connectors.xid.run import KmsgMetrics, XidSource
from connectors.xid.settings import KmsgSettings
from connectors.xid.textlog import TextLogReader
from schemas import progress as wire
from schemas.codec import decode_event
from schemas.events import Tick, XidEvent
from tests.connectors.test_publish_progress import running, stop
from tests.kafka_helpers import KafkaTestEnv, consume_until, eventually

NODE = "gpu-node-07"
KEY = f"c1/{NODE}".encode()
BEAT_S = 0.1


def quiet_kmsg(log: Path, state: Path) -> tuple[XidSource, TextLogReader]:
    """The ``connect kmsg`` source over a kernel log with nothing in it, and its reader."""
    reader = TextLogReader(path=log, node=NODE, cluster="c1", state_path=state)
    settings = KmsgSettings(cluster="c1", node=NODE, poll_interval_seconds=0.02)
    source = XidSource(reader, settings=settings, stop=asyncio.Event(), metrics=KmsgMetrics())
    return source, reader


async def run_quietly(log: Path, state: Path, producer: EventProducer) -> tuple[int, Publisher]:
    """Run a quiet reader's publish loop until it sent two heartbeats; (wall ms at start, loop)."""
    source, reader = quiet_kmsg(log, state)
    started = time.time_ns() // 1_000_000
    publisher = Publisher(source, producer, options=PublishOptions(heartbeat_seconds=BEAT_S))
    task = await running(publisher)
    try:
        await eventually(lambda: publisher.heartbeats >= 2, timeout=10, what="two heartbeats")
    finally:
        await stop(task)
        reader.close()
    return started, publisher


def beats(records: list[Any]) -> list[Any]:
    """Heartbeat records (keyless, not an announcement), in offset order."""
    return sorted(
        (r for r in records if r.key is None and not wire.read_partitions(r.headers)),
        key=lambda r: (r.partition, r.offset),
    )


@pytest.mark.asyncio
async def test_a_quiet_kmsg_reader_heartbeats_its_nodes_partition_before_and_after_a_restart(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    await kafka.acreate_topics()
    log, state = tmp_path / "kern.log", tmp_path / "kmsg.json"
    log.write_text("")
    async with EventProducer(kafka.kwargs, kafka.layout) as producer:
        first, publisher = await run_quietly(log, state, producer)
        again, restarted = await run_quietly(log, state, producer)
    topic = kafka.layout.raw_topic(XidEvent)
    own = (topic, partition_of(KEY, kafka.settings.partitions))
    assert publisher.used == restarted.used == {own}
    assert publisher.source_id == restarted.source_id
    records = await consume_until(
        kafka.bootstrap,
        list(kafka.layout.raw_topics),
        lambda rs: len([r for r in beats(rs) if r.timestamp >= again]) >= 2,
        what="heartbeats of the restarted reader",
    )
    assert [r for r in records if r.key is not None] == [], "it published no record"
    ticks = beats(records)
    assert {(r.topic, r.partition) for r in ticks} == {own}, "its node key's partition only"
    for start, end in ((first, again), (again, None)):
        run = [r for r in ticks if r.timestamp >= start and (end is None or r.timestamp < end)]
        assert len(run) >= 2
        # The first heartbeat comes one interval after the first idle poll (a generous
        # margin for a loaded machine: the point is "from the start", not "after a record").
        assert run[0].timestamp - start < BEAT_S * 1000 + 3000
        for record in run:
            tick = decode_event(record.value)
            assert isinstance(tick, Tick)
            assert (tick.cluster, tick.node, tick.source) == ("c1", NODE, "kmsg")
            signed = wire.read(record.headers)
            assert isinstance(signed, tuple)
            assert signed[0] == publisher.source_id.encode()
