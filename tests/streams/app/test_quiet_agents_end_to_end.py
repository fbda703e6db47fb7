"""Quiet node agents through the whole path: publish loop -> Kafka -> pipeline -> core.

The core's tests feed synthetic heartbeats; this goes the way a cluster does. A kernel-log
reader that once published an XID is restarted (a DaemonSet rollout) and then has nothing
to say: it is alive, so no ``monitoring_gap``. A dcgm source on an idle node whose exporter
answered once and refuses since publishes nothing at all, yet its heartbeats (with the
last good read) reach the core, which says the node is blind. Real time, short settings:
a 2 s silence, heard to 0.5 s.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from connectors.kafka.producer import EventProducer
from connectors.publish import Publisher, PublishOptions
from connectors.source import Batch
from schemas.incidents import Incident
from streams.app.pipeline import Pipeline
from tests.connectors.test_publish_progress import Script, running, stop
from tests.core_helpers import config
from tests.factories import T0, Cluster
from tests.kafka_helpers import KafkaTestEnv, eventually

QUIET, IDLE = "gpu-node-quiet", "gpu-node-idle"
SILENCE_S = 2.0
OPTIONS = PublishOptions(heartbeat_seconds=0.1)


def since_t0(moment: float) -> float:
    return moment - T0.timestamp()


class KernelLog(Script):
    """A kernel-log reader of ``node``: family ``kmsg``, no ``read_at`` (reading when idle)."""

    family = "kmsg"

    def __init__(self, node: str, batches: list[Batch]) -> None:
        super().__init__(batches, idle_seconds=0.02)
        self.name = "kmsg:/dev/kmsg"
        self.key = f"c1/{node}".encode()


class RefusedDcgm(Script):
    """A dcgm source of ``node`` whose exporter answered at ``read`` and refuses since: it
    publishes nothing (an idle node) and its progress goes on (a failed scrape is idle)."""

    family = "dcgm"

    def __init__(self, node: str, read: datetime) -> None:
        super().__init__([], idle_seconds=0.02)
        self.name = "http://127.0.0.1:9400/metrics"
        self.key = f"c1/{node}".encode()
        self.last_ok = read

    def read_at(self) -> datetime | None:
        return self.last_ok


async def feed(
    kafka: KafkaTestEnv, pipeline: Pipeline, done: asyncio.Event, out: list[Incident]
) -> None:
    """A worker owning every raw partition: fetch, process with the wall clock, tick."""
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id=None)
    await consumer.start()
    try:
        await consumer.topics()
        tps = [
            TopicPartition(topic, partition)
            for topic in kafka.layout.raw_topics
            for partition in sorted(consumer.partitions_for_topic(topic) or ())
        ]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        pipeline.retain((tp.topic, tp.partition) for tp in tps)
        while not done.is_set():
            fetched = await consumer.getmany(timeout_ms=50)
            out += pipeline.process_fetched(fetched, now=time.time()).incidents
            out += pipeline.tick(time.time()).incidents
    finally:
        await consumer.stop()


def gaps(incidents: list[Incident]) -> list[Incident]:
    return [i for i in incidents if i.type == "monitoring_gap"]


@pytest.mark.asyncio
async def test_a_restarted_quiet_kmsg_reader_is_not_silent_and_a_refused_idle_dcgm_is(
    kafka: KafkaTestEnv,
) -> None:
    await kafka.acreate_topics()
    c = Cluster()
    start = time.time()
    nodes = [c.node(QUIET, since_t0(start)), c.node(IDLE, since_t0(start))]
    xid = c.xid(QUIET, since_t0(start) + 0.05, 13)
    k8s = Script([Batch(events=[*nodes], records=2, progress=nodes[0].time)])
    k8s.name, k8s.key = "k8s", b"c1"
    cfg = config(monitoring_silence_seconds=SILENCE_S, monitoring_resolution_seconds=0.5)
    pipeline = Pipeline(cfg, kafka.layout, source_idle_seconds=1.0)
    done = asyncio.Event()
    incidents: list[Incident] = []
    worker = asyncio.create_task(feed(kafka, pipeline, done, incidents))
    tasks = []
    async with EventProducer(kafka.kwargs, kafka.layout) as producer:
        try:
            tasks.append(await running(Publisher(k8s, producer, options=OPTIONS)))
            first = Publisher(
                KernelLog(QUIET, [Batch(events=[xid], records=1, progress=xid.time)]),
                producer,
                options=OPTIONS,
            )
            run = await running(first)
            await eventually(lambda: first.heartbeats >= 3, timeout=10, what="kmsg heartbeats")
            await stop(run)  # the rollout: the new reader has nothing to say
            restarted = Publisher(KernelLog(QUIET, []), producer, options=OPTIONS)
            tasks.append(await running(restarted))
            read = datetime.now(UTC)
            tasks.append(
                await running(Publisher(RefusedDcgm(IDLE, read), producer, options=OPTIONS))
            )
            # The dcgm source is silent from ``read``; the restarted reader was, if at all,
            # from before: whichever gap the core opens first comes no later than this.
            await eventually(lambda: gaps(incidents), timeout=4 * SILENCE_S + 5, what="a gap")
        finally:
            for task in tasks:
                await stop(task)
            done.set()
    await worker
    opened = gaps(incidents)
    assert {(i.node, i.attributes["source"]) for i in opened} == {(IDLE, "dcgm")}, [
        (i.node, i.attributes, i.status) for i in opened
    ]
    gap = opened[0]
    assert gap.status == "open"
    assert gap.attributes["reason"] == "silent"
    heard = datetime.fromisoformat(gap.attributes["since"])
    assert heard <= read
    assert (read - heard).total_seconds() < 0.5, "its last good read, to the resolution"
